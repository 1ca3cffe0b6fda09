/**
 * Version of the wire protocol spoken by this package. 2 adds `network` and `stdin` to
 * `ExecRequest` (a version 1 bridge refuses them as unknown fields) and `network` to `/health`.
 * 3 adds durable calls: `detach` in `ExecRequest`, `GET /exec/{sandboxId}` (`CallStatus`, or a
 * re-attached event stream) and `durable` in `/health`.
 */
export const PROTOCOL_VERSION = 3;

/** Working directory of a command inside its sandbox when the caller names none. */
export const DEFAULT_CWD = "/workspace";

/** Seconds a command may run when the caller names no timeout. */
export const DEFAULT_TIMEOUT_SECONDS = 120;

/** Exit code reported for a command that hit its deadline (as `timeout(1)` does). */
export const TIMEOUT_EXIT_CODE = 124;

/** Most bytes of joined output shown to an agent (50 KiB); the tail is kept. */
export const DISPLAY_MAX_BYTES = 51_200;

/** Most lines of joined output shown to an agent; the tail is kept. */
export const DISPLAY_MAX_LINES = 2_000;

/** Prefix of generated sandbox ids: `mikan-task-<uuid>`. */
export const DEFAULT_ID_PREFIX = "mikan-task";

/** Longest sandbox id a bridge accepts. */
export const SANDBOX_ID_MAX_LENGTH = 63;

/** Longest interval between two SSE events of a running command. */
export const MAX_HEARTBEAT_INTERVAL_MS = 15_000;

/** Network policy of a call when neither the caller nor the deployer names one. */
export const DEFAULT_NETWORK_POLICY = "none";
