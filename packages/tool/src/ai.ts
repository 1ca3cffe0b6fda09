/**
 * `remote_task` for the Vercel AI SDK (`ai` ^7).
 *
 * Errors follow the AI SDK convention: `execute` throws, the SDK records a `tool-error` part and
 * sends the model an `error-text` output whose value is the error message, which is exactly the
 * reference result text (e.g. `...\n\nCommand exited with code 1`). Successful results reach the
 * model as plain text through `toModelOutput`; the full structured result stays in the tool output.
 */
import { type Tool, tool } from "ai";
import { RemoteTaskToolError } from "./errors.js";
import type { RemoteTaskToolResult } from "./result.js";
import type { RemoteTaskArgs } from "./schema.js";
import {
  type EnvLike,
  isRemoteTaskAvailable,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

export type RemoteTaskAiTool = Tool<RemoteTaskArgs, RemoteTaskToolResult>;

/** An AI SDK tool running `remote_task`; put it in `tools: { remote_task: remoteTaskTool() }`. */
export function remoteTaskTool(source: RemoteTaskToolSource = {}): RemoteTaskAiTool {
  const core = toRemoteTaskTool(source);
  return tool({
    title: core.title,
    description: core.description,
    inputSchema: core.parameters,
    async execute(input, { abortSignal }) {
      const result = await core.execute(input, { signal: abortSignal });
      if (result.isError) throw new RemoteTaskToolError(result);
      return result;
    },
    toModelOutput: ({ output }) => ({ type: "text", value: output.text }),
  });
}

/**
 * `{ remote_task }` when `env` configures a bridge, otherwise `{}`: spread it into `tools` so a
 * host without a bridge never advertises the tool.
 */
export function remoteTaskToolSet(
  env?: EnvLike,
  options: Omit<RemoteTaskToolOptions, "client" | "env"> = {},
): { remote_task?: RemoteTaskAiTool } {
  return isRemoteTaskAvailable(env) ? { remote_task: remoteTaskTool({ ...options, env }) } : {};
}
