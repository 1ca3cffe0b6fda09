/**
 * `remote_task` for the Vercel AI SDK (`ai` 5, 6 and 7).
 *
 * Errors follow the AI SDK's split between a tool that worked and a tool that failed:
 * - the command ran (any exit code, or a timeout): `execute` returns the result and
 *   `toModelOutput` shows the model its exact text, as `text` on success and `error-text` for a
 *   non-zero exit or a timeout. The structured result stays in the step's `tool-result` part and
 *   in UI messages, so later turns see the same text.
 * - the tool could not run the command (bad arguments, no bridge configured, bridge or network
 *   failure, aborted): `execute` throws a `RemoteTaskToolError`, which the SDK records as a
 *   `tool-error` part and shows the model as `error-text`.
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

/**
 * The tool's result from what `toModelOutput` is called with: AI SDK 6 and 7 pass
 * `{ toolCallId, input, output }`, AI SDK 5 (and Mastra, which calls tools that way) the output
 * itself. The result always has `text` and `isError`, and never an `output` field.
 */
function toolResultOf(
  options: { output: RemoteTaskToolResult } | RemoteTaskToolResult,
): RemoteTaskToolResult {
  return "output" in options ? options.output : options;
}

/**
 * An AI SDK tool running `remote_task`; put it in
 * `tools: { remote_task: createRemoteTaskAiTool() }`.
 */
export function createRemoteTaskAiTool(source: RemoteTaskToolSource = {}): RemoteTaskAiTool {
  const core = toRemoteTaskTool(source);
  return tool({
    description: core.description,
    inputSchema: core.parameters,
    async execute(input, { abortSignal }) {
      const result = await core.execute(input, { signal: abortSignal });
      if (result.result === undefined) throw new RemoteTaskToolError(result);
      return result;
    },
    toModelOutput: (options) => {
      const output = toolResultOf(options);
      return { type: output.isError ? "error-text" : "text", value: output.text };
    },
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
  return isRemoteTaskAvailable(env)
    ? { remote_task: createRemoteTaskAiTool({ ...options, env }) }
    : {};
}
