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
  MIN_TOKEN_LENGTH,
} from "./bridge.js";
export { CANCELLED_EXIT_CODE } from "./call.js";
export type { CorsOptions } from "./cors.js";
export type { InFlightCounts } from "./host/in-flight.js";
export {
  type AdmissionOptions,
  type AdmissionSettings,
  CONCURRENT_CALLS_PER_CORE,
  DEFAULT_KEPT_SECONDS,
  DEFAULT_LIMITS,
  DEFAULT_MAX_KEPT,
  DEFAULT_MAX_KEPT_BYTES,
  DEFAULT_MAX_QUEUED_BYTES,
  DEFAULT_STREAM_BUFFER_BYTES,
  type DurableOptions,
  defaultAdmission,
  MIN_OUTPUT_CAP_BYTES,
  QUEUED_CALL_OVERHEAD_BYTES,
  QUEUED_CALLS_PER_RUNNING,
  queuedCallBytes,
} from "./limits.js";
export {
  type BridgeLogEntry,
  type BridgeLogger,
  type EndReason,
  type ExecLogEntry,
  jsonLineLogger,
  type ProblemLogEntry,
  silentLogger,
  stderrLogger,
  type WarningLogEntry,
} from "./logger.js";
export {
  hostMatches,
  isPublicAddress,
  type NetworkMode,
  type NetworkOptions,
  type NetworkSettings,
  networkAllows,
  type ParsedHostPattern,
  parseHostPattern,
} from "./network.js";
export { type ErrorDetails, errorResponse } from "./responses.js";
export {
  applySecrets,
  hideSecrets,
  type SecretDestination,
  type SecretHeaders,
  type SecretsVerdict,
  secretAllowed,
} from "./secret-headers.js";
export {
  type CallSecret,
  resolveSecrets,
  type SecretDeclaration,
  type SecretReader,
  type SecretSource,
  type SecretsOptions,
} from "./secrets.js";
export { BRIDGE_VERSION } from "./version.js";
