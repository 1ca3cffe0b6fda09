export {
  REMOTE_TASK_TOOL_NAME,
  REMOTE_TASK_TOOL_TITLE,
  remoteTaskDescription,
} from "./description.js";
export { RemoteTaskToolError } from "./errors.js";
export {
  ABORTED_TEXT,
  type RemoteTaskStatus,
  type RemoteTaskToolResult,
  resultFromTask,
} from "./result.js";
export {
  type JsonSchemaObject,
  type RemoteTaskArgs,
  type RemoteTaskInput,
  type RemoteTaskParametersSchema,
  remoteTaskJsonSchema,
  remoteTaskParameters,
} from "./schema.js";
export {
  createRemoteTaskTool,
  type EnvLike,
  type ExecuteOptions,
  isRemoteTaskAvailable,
  type RemoteTaskTool,
  type RemoteTaskToolClient,
  type RemoteTaskToolOptions,
  type RemoteTaskToolSource,
  remoteTaskTools,
  toRemoteTaskTool,
} from "./tool.js";
