export { formatOutput, formatSize, truncateTail } from "@remote-task/protocol";
export { clientFromEnv, createClient } from "./client.js";
export { isConfigured } from "./config.js";
export {
  AbortError,
  AuthenticationError,
  BridgeError,
  CapacityError,
  ConfigurationError,
  ConnectionError,
  InvalidRequestError,
  ProtocolError,
  RemoteTaskError,
  type RemoteTaskErrorOptions,
  TimeoutError,
} from "./errors.js";
export type {
  CancelResult,
  ClientOptions,
  OutputEvent,
  Progress,
  RemoteTaskClient,
  RetryInfo,
  RetryOptions,
  RunManyOptions,
  RunOptions,
  SettledTask,
  Task,
  TaskResult,
} from "./types.js";
