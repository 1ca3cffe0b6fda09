export {
  BackendError,
  type BackendErrorCode,
  type BackendHealth,
  type ExecSpec,
  type OutputChunk,
  type RunningCommand,
  type SandboxBackend,
} from "./backend.js";
export {
  type BridgeHandler,
  type BridgeOptions,
  type BridgeRequestContext,
  createBridge,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
} from "./bridge.js";
export { CANCELLED_EXIT_CODE } from "./call.js";
export { DEFAULT_LIMITS, MIN_OUTPUT_CAP_BYTES } from "./limits.js";
export {
  type BridgeLogEntry,
  type BridgeLogger,
  type EndReason,
  type ExecLogEntry,
  jsonLineLogger,
  type ProblemLogEntry,
  silentLogger,
  stderrLogger,
} from "./logger.js";
export { type ErrorDetails, errorResponse } from "./responses.js";
export { BRIDGE_VERSION } from "./version.js";
