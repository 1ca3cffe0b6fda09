/**
 * `remote_task` as a pi-agent-core `AgentTool`. It behaves like the reference tool: the result
 * text is returned as text content; a non-zero exit, a timeout, an abort or a bridge failure
 * throws an `Error` (a `RemoteTaskToolError`) whose message is that same text, which the agent
 * loop turns into an error tool result. Only types are imported from the framework, so this
 * entry has no runtime dependency on it. The parameter schema is plain JSON Schema, which
 * pi-agent-core validates like a TypeBox schema.
 */
import type { AgentTool, AgentToolResult } from "@mariozechner/pi-agent-core";
import type { TaskResult } from "@remote-task/client";
import { RemoteTaskToolError } from "./errors.js";
import type { RemoteTaskStatus } from "./result.js";
import {
  type EnvLike,
  isRemoteTaskAvailable,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

/** Structured details of a successful call, for logs and UIs (never sent to the model). */
export interface RemoteTaskDetails {
  status: RemoteTaskStatus;
  result?: TaskResult;
}

type AgentToolSchema = AgentTool["parameters"];

export type RemoteTaskPiTool = AgentTool<AgentToolSchema, RemoteTaskDetails>;

/** An `AgentTool` running `remote_task`; add it to the agent's `tools`. */
export function createRemoteTaskPiTool(source: RemoteTaskToolSource = {}): RemoteTaskPiTool {
  const core = toRemoteTaskTool(source);
  return {
    name: core.name,
    label: core.title,
    description: core.description,
    parameters: core.jsonSchema as AgentToolSchema,
    async execute(_toolCallId, params, signal): Promise<AgentToolResult<RemoteTaskDetails>> {
      const result = await core.execute(params, { signal });
      if (result.isError) throw new RemoteTaskToolError(result);
      const details: RemoteTaskDetails = { status: result.status };
      if (result.result) details.result = result.result;
      return { content: [{ type: "text", text: result.text }], details };
    },
  };
}

/** `[remote_task]` when `env` configures a bridge, otherwise `[]`. */
export function remoteTaskPiTools(
  env?: EnvLike,
  options: Omit<RemoteTaskToolOptions, "client" | "env"> = {},
): RemoteTaskPiTool[] {
  return isRemoteTaskAvailable(env) ? [createRemoteTaskPiTool({ ...options, env })] : [];
}
