/**
 * `remote_task` for the Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`): the in-process tool
 * definition its `tool(name, description, zodShape, handler)` makes, for
 * `createSdkMcpServer({ name, tools: [createRemoteTaskClaudeTool()] })`. The definition is a plain
 * object (name, description, the zod shape of the arguments, the handler), built here without
 * importing the SDK, whose install carries a platform binary of the Claude Code CLI (about
 * 400 MB); its type is declared below. The handler answers with an MCP `CallToolResult`: the
 * result text, `isError` for a non-zero exit, a timeout or a bridge failure; the call's abort
 * signal stops the remote command.
 */
import { toCallToolResult } from "./result.js";
import type { RemoteTaskParametersSchema } from "./schema.js";
import {
  type EnvLike,
  isRemoteTaskAvailable,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

/** What the SDK's `tool()` returns (`SdkMcpToolDefinition`) for `remote_task`. */
export interface RemoteTaskClaudeTool {
  name: string;
  description: string;
  /** The zod shape of `{ command, timeout? }` (zod 4, as the SDK takes). */
  inputSchema: RemoteTaskParametersSchema["shape"];
  handler: (
    args: unknown,
    extra: unknown,
  ) => Promise<{ content: { type: "text"; text: string }[]; isError: boolean }>;
}

/** The MCP request extras the SDK passes the handler; only the abort signal is read. */
function signalOf(extra: unknown): AbortSignal | undefined {
  const signal = (extra as { signal?: unknown } | undefined)?.signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

/**
 * A Claude Agent SDK tool running `remote_task`: put it in
 * `createSdkMcpServer({ name: "remote-task", tools: [createRemoteTaskClaudeTool()] })`; the model
 * calls it as `mcp__remote-task__remote_task`.
 */
export function createRemoteTaskClaudeTool(
  source: RemoteTaskToolSource = {},
): RemoteTaskClaudeTool {
  const core = toRemoteTaskTool(source);
  return {
    name: core.name,
    description: core.description,
    inputSchema: core.parameters.shape,
    handler: async (args, extra) =>
      toCallToolResult(await core.execute(args, { signal: signalOf(extra) })),
  };
}

/** `[remote_task]` when `env` configures a bridge, otherwise `[]`: for `createSdkMcpServer`'s `tools`. */
export function remoteTaskClaudeTools(
  env?: EnvLike,
  options: Omit<RemoteTaskToolOptions, "client" | "env"> = {},
): RemoteTaskClaudeTool[] {
  return isRemoteTaskAvailable(env) ? [createRemoteTaskClaudeTool({ ...options, env })] : [];
}
