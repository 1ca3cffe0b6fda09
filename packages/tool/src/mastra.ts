/**
 * `remote_task` for Mastra: a `WorkspaceSandbox` provider, so a `Workspace({ sandbox })` and its
 * `execute_command` tool run each command in a fresh, throwaway remote sandbox. Mastra's shape is
 * declared here (nothing is imported from `@mastra/core`, whose install is large); a provider is
 * a plain object with `executeCommand`. Each command gets its own sandbox: files do not carry over
 * from one command to the next (the instructions say so to the model), and there is nothing to
 * snapshot. A command that ran (any exit code, or its timeout) is a result; a bridge or
 * configuration failure throws the client's error.
 */
import { clientFromEnv, type RemoteTaskClient, type TaskResult } from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import type { EnvLike, RemoteTaskToolClient } from "./tool.js";

/** What Mastra passes `executeCommand` (its `ExecuteCommandOptions`); `timeout` in milliseconds. */
export interface MastraCommandOptions {
  timeout?: number | undefined;
  env?: Readonly<Record<string, string | undefined>> | undefined;
  cwd?: string | undefined;
  onStdout?: ((data: string) => void) | undefined;
  onStderr?: ((data: string) => void) | undefined;
  abortSignal?: AbortSignal | undefined;
}

/** What `executeCommand` returns (Mastra's `CommandResult`). */
export interface MastraCommandResult {
  success: boolean;
  exitCode: number;
  stdout: string;
  stderr: string;
  executionTimeMs: number;
  timedOut: boolean;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  command: string;
  args: string[];
}

/** A Mastra `WorkspaceSandbox` running each command through a remote-task bridge. */
export interface RemoteTaskMastraSandbox {
  readonly id: string;
  readonly name: string;
  readonly provider: "remote-task";
  status: "ready" | "destroyed";
  getInstructions(): string;
  executeCommand(
    command: string,
    args?: string[],
    options?: MastraCommandOptions,
  ): Promise<MastraCommandResult>;
  /** Refused: every command has a fresh sandbox, and nothing of it is kept. */
  snapshot(): Promise<void>;
  /** Closes the client the sandbox created from `env` (an injected client is left open). */
  destroy(): Promise<void>;
}

export interface RemoteTaskMastraSandboxOptions {
  /** A client to run commands with (the caller owns and closes it); default: one from `env`. */
  client?: RemoteTaskToolClient | undefined;
  /** Where the default client's bridge is configured (default `process.env`). */
  env?: EnvLike | undefined;
  /** Where every command may connect (default: the bridge's default); the model cannot change it. */
  network?: NetworkPolicy | undefined;
  /**
   * Names of the bridge's secrets every command gets (Mastra's `execute_command` has no parameter
   * for them): each command sees a placeholder under each name, never the value, and the
   * instructions tell the model which names there are.
   */
  secrets?: readonly string[] | undefined;
  /** The sandbox's id in Mastra (default `remote-task`). */
  id?: string | undefined;
}

/** What the model reads about this sandbox. */
export const MASTRA_SANDBOX_INSTRUCTIONS =
  "Commands run in a remote sandbox through remote-task. Each command gets a fresh, empty sandbox that is thrown away afterwards: files and processes do not carry over from one command to the next, so put every step that needs the same files in one command (join them with &&).";

/** The instructions, naming the secrets every command gets. */
function instructions(secrets: readonly string[]): string {
  if (secrets.length === 0) return MASTRA_SANDBOX_INSTRUCTIONS;
  const names = secrets.map((name) => `$${name}`).join(", ");
  return `${MASTRA_SANDBOX_INSTRUCTIONS} Credentials are in environment variables ${names}: each holds a placeholder, never the value, which the sandbox's network proxy swaps for the real value only in request headers to that credential's own hosts (e.g. curl -H "Authorization: Bearer $${secrets[0]}" ...).`;
}

/** `command` with `args` appended, each quoted for a POSIX shell. */
function commandLine(command: string, args: readonly string[]): string {
  return [command, ...args.map((arg) => `'${arg.replaceAll("'", `'\\''`)}'`)].join(" ");
}

/** The variables Mastra passes that have a value. */
function definedEnv(env: MastraCommandOptions["env"]): Record<string, string> | undefined {
  if (env === undefined) return undefined;
  const entries = Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined);
  return Object.fromEntries(entries);
}

function toCommandResult(result: TaskResult, command: string, args: string[]): MastraCommandResult {
  const timedOut = result.outcome === "timeout";
  return {
    success: result.exitCode === 0 && !timedOut,
    exitCode: result.exitCode,
    stdout: result.stdout,
    stderr: result.stderr,
    executionTimeMs: result.durationMs,
    timedOut,
    stdoutTruncated: result.stdoutTruncated,
    stderrTruncated: result.stderrTruncated,
    command,
    args,
  };
}

function defaultEnv(): EnvLike {
  return typeof process === "undefined" ? {} : process.env;
}

/**
 * A `WorkspaceSandbox` for Mastra: `new Workspace({ sandbox: createRemoteTaskSandbox() })`. The
 * bridge comes from `CLOUDFLARE_SANDBOX_URL` and `CLOUDFLARE_SANDBOX_TOKEN` unless a `client` is
 * given.
 */
export function createRemoteTaskSandbox(
  options: RemoteTaskMastraSandboxOptions = {},
): RemoteTaskMastraSandbox {
  const { network } = options;
  const secrets = [...(options.secrets ?? [])];
  let owned: RemoteTaskClient | undefined;
  const clientFor = (): RemoteTaskToolClient => {
    if (options.client) return options.client;
    owned ??= clientFromEnv(options.env ?? defaultEnv());
    return owned;
  };
  const id = options.id ?? "remote-task";
  return {
    id,
    name: "remote-task",
    provider: "remote-task",
    status: "ready",
    getInstructions: () => instructions(secrets),
    async executeCommand(command, args = [], commandOptions = {}) {
      const { onStdout, onStderr } = commandOptions;
      const streamed = onStdout !== undefined || onStderr !== undefined;
      const env = definedEnv(commandOptions.env);
      const result = await clientFor().run(commandLine(command, args), {
        ...(commandOptions.timeout === undefined
          ? {}
          : { timeoutSeconds: commandOptions.timeout / 1000 }),
        ...(commandOptions.cwd === undefined ? {} : { cwd: commandOptions.cwd }),
        ...(env === undefined ? {} : { env }),
        ...(network === undefined ? {} : { network }),
        ...(secrets.length === 0 ? {} : { secrets }),
        signal: commandOptions.abortSignal,
        ...(streamed
          ? {
              onOutput: ({ stream, data }) =>
                stream === "stdout" ? onStdout?.(data) : onStderr?.(data),
            }
          : {}),
      });
      return toCommandResult(result, command, args);
    },
    snapshot: () =>
      Promise.reject(
        new Error(
          "remote-task sandboxes cannot be snapshotted: each command runs in a fresh sandbox that is thrown away afterwards.",
        ),
      ),
    async destroy() {
      this.status = "destroyed";
      const client = owned;
      owned = undefined;
      await client?.close();
    },
  };
}
