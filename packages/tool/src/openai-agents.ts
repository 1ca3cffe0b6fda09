/**
 * `remote_task` for the OpenAI Agents SDK (`@openai/agents` >= 0.19): a function tool in strict
 * mode, whose `timeout: null` (what the model sends for "the default") means the tool's default.
 * The model reads the result text whatever happened (a non-zero exit, a timeout, a bridge
 * failure), as with the function-calling adapter; the run's abort signal stops the remote command.
 */
import { type FunctionTool, tool } from "@openai/agents";
import { strictSchema, withoutNullArguments } from "./strict-schema.js";
import {
  type EnvLike,
  isRemoteTaskAvailable,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

export type RemoteTaskOpenAIAgentsTool = FunctionTool<
  unknown,
  ReturnType<typeof strictSchema>,
  string
>;

/** A function tool running `remote_task`; add it to an `Agent`'s `tools`. */
export function createRemoteTaskOpenAIAgentsTool(
  source: RemoteTaskToolSource = {},
): RemoteTaskOpenAIAgentsTool {
  const core = toRemoteTaskTool(source);
  return tool({
    name: core.name,
    description: core.description,
    parameters: strictSchema(core.jsonSchema),
    strict: true,
    async execute(input, _context, details) {
      const result = await core.execute(withoutNullArguments(input), { signal: details?.signal });
      return result.text;
    },
  }) as RemoteTaskOpenAIAgentsTool;
}

/** `[remote_task]` when `env` configures a bridge, otherwise `[]`. */
export function remoteTaskOpenAIAgentsTools(
  env?: EnvLike,
  options: Omit<RemoteTaskToolOptions, "client" | "env"> = {},
): RemoteTaskOpenAIAgentsTool[] {
  return isRemoteTaskAvailable(env) ? [createRemoteTaskOpenAIAgentsTool({ ...options, env })] : [];
}
