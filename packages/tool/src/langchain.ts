/**
 * `remote_task` for LangChain.js: a `@langchain/core` tool (any LangChain agent's `tools`), and a
 * deepagents sandbox backend whose `execute(command)` runs the command remotely and answers with
 * deepagents' `ExecuteResponse`. The backend's shape is declared here, nothing is imported from
 * deepagents. Each command gets a fresh sandbox that is thrown away afterwards, so the backend
 * keeps no files: its file operations (ls, read, write, edit, grep, glob) answer with an error
 * that says so, and the model does its file work inside `execute` commands.
 */
import { tool } from "@langchain/core/tools";
import type { TaskResult } from "@remote-task/client";
import { clientFromEnv, type RemoteTaskClient } from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import type { RemoteTaskArgs } from "./schema.js";
import {
  type EnvLike,
  isRemoteTaskAvailable,
  type RemoteTaskToolClient,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

/**
 * A LangChain tool running `remote_task`. The model reads the result text whatever happened (a
 * non-zero exit, a timeout, a bridge failure); the run's abort signal stops the remote command.
 */
export function createRemoteTaskLangChainTool(source: RemoteTaskToolSource = {}) {
  const core = toRemoteTaskTool(source);
  return tool(
    async (input: RemoteTaskArgs, config) =>
      (await core.execute(input, { signal: config?.signal })).text,
    { name: core.name, description: core.description, schema: core.parameters },
  );
}

export type RemoteTaskLangChainTool = ReturnType<typeof createRemoteTaskLangChainTool>;

/** `[remote_task]` when `env` configures a bridge, otherwise `[]`. */
export function remoteTaskLangChainTools(
  env?: EnvLike,
  options: Omit<RemoteTaskToolOptions, "client" | "env"> = {},
): RemoteTaskLangChainTool[] {
  return isRemoteTaskAvailable(env) ? [createRemoteTaskLangChainTool({ ...options, env })] : [];
}

/** deepagents' `ExecuteResponse`. */
export interface ExecuteResponse {
  /** stdout, then stderr. */
  output: string;
  /** The exit code; null when the command's outcome is unknown (the bridge failed). */
  exitCode: number | null;
  truncated: boolean;
}

/** A file operation's answer: always an error here. */
interface NoFilesResult {
  error: string;
}

/** A deepagents sandbox backend (`SandboxBackendProtocolV2`) running through a bridge. */
export interface RemoteTaskDeepAgentsBackend {
  readonly id: string;
  execute(command: string): Promise<ExecuteResponse>;
  ls(path: string): Promise<NoFilesResult>;
  read(filePath: string, offset?: number, limit?: number): Promise<NoFilesResult>;
  readRaw(filePath: string): Promise<NoFilesResult>;
  write(filePath: string, content: string): Promise<NoFilesResult>;
  edit(filePath: string, oldString: string, newString: string): Promise<NoFilesResult>;
  grep(pattern: string, path?: string | null, glob?: string | null): Promise<NoFilesResult>;
  glob(pattern: string, path?: string): Promise<NoFilesResult>;
  /** Closes the client the backend created from `env` (an injected client is left open). */
  close(): Promise<void>;
}

export interface RemoteTaskDeepAgentsBackendOptions {
  /** A client to run commands with (the caller owns and closes it); default: one from `env`. */
  client?: RemoteTaskToolClient | undefined;
  /** Where the default client's bridge is configured (default `process.env`). */
  env?: EnvLike | undefined;
  /** Seconds each command may run (default: the client's, 120). */
  timeoutSeconds?: number | undefined;
  /** Where every command may connect (default: the bridge's default); the model cannot change it. */
  network?: NetworkPolicy | undefined;
  /**
   * Names of the bridge's secrets every command gets (deepagents' `execute` has no parameter for
   * them): each command sees a placeholder under each name, never the value.
   */
  secrets?: readonly string[] | undefined;
  /** The backend's id (default `remote-task`). */
  id?: string | undefined;
}

/** What every file operation answers. */
export const NO_FILES_TEXT =
  "remote-task keeps no files: each command runs in a fresh sandbox that is thrown away afterwards. Do file work inside one execute command (e.g. write the file with a heredoc and use it in the same command).";

function outputOf(result: TaskResult): string {
  if (result.stderr === "") return result.stdout;
  const separator = result.stdout === "" || result.stdout.endsWith("\n") ? "" : "\n";
  return `${result.stdout}${separator}${result.stderr}`;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function defaultEnv(): EnvLike {
  return typeof process === "undefined" ? {} : process.env;
}

/**
 * A deepagents sandbox backend: `createDeepAgent({ model, backend: createRemoteTaskBackend() })`
 * gives the agent an `execute` tool that runs each command in a fresh remote sandbox.
 */
export function createRemoteTaskBackend(
  options: RemoteTaskDeepAgentsBackendOptions = {},
): RemoteTaskDeepAgentsBackend {
  let owned: RemoteTaskClient | undefined;
  const clientFor = (): RemoteTaskToolClient => {
    if (options.client) return options.client;
    owned ??= clientFromEnv(options.env ?? defaultEnv());
    return owned;
  };
  const noFiles = async (): Promise<NoFilesResult> => ({ error: NO_FILES_TEXT });
  const secrets = [...(options.secrets ?? [])];
  return {
    id: options.id ?? "remote-task",
    async execute(command) {
      try {
        const result = await clientFor().run(command, {
          ...(options.timeoutSeconds === undefined
            ? {}
            : { timeoutSeconds: options.timeoutSeconds }),
          ...(options.network === undefined ? {} : { network: options.network }),
          ...(secrets.length === 0 ? {} : { secrets }),
        });
        return {
          output: outputOf(result),
          exitCode: result.exitCode,
          truncated: result.stdoutTruncated || result.stderrTruncated,
        };
      } catch (error) {
        return {
          output: `remote_task failed: ${messageOf(error)}`,
          exitCode: null,
          truncated: false,
        };
      }
    },
    ls: noFiles,
    read: noFiles,
    readRaw: noFiles,
    write: noFiles,
    edit: noFiles,
    grep: noFiles,
    glob: noFiles,
    async close() {
      const client = owned;
      owned = undefined;
      await client?.close();
    },
  };
}
