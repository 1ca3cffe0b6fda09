export {
  type CallState,
  type CallStatus,
  formatOutput,
  formatSize,
  type HostPattern,
  type NetworkPolicy,
  truncateTail,
} from "@remote-task/protocol";
export { clientFromEnv, createClient } from "./client.js";
export { isConfigured } from "./config.js";
export {
  AbortError,
  AuthenticationError,
  BridgeError,
  CapacityError,
  ConfigurationError,
  ConnectionError,
  ForbiddenError,
  InvalidRequestError,
  ProtocolError,
  RemoteTaskError,
  type RemoteTaskErrorOptions,
  TimeoutError,
} from "./errors.js";
export type { StdinInput } from "./stdin.js";
export type {
  CallHandle,
  CancelResult,
  ClientOptions,
  HandleWaitOptions,
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
  UndiciDispatcher,
} from "./types.js";
