import { brandClass } from "@remote-task/internal";
import type { ErrorCode, Issue } from "@remote-task/protocol";

/** What an error needs to know about the call it ends. */
export interface CallFacts {
  sandboxId: string | undefined;
  /** Whether the command may have started (see `RemoteTaskError.mayHaveRun`). */
  mayHaveRun: boolean;
}

export interface RemoteTaskErrorOptions {
  cause?: unknown;
  /** HTTP status of the bridge's answer, when there was one. */
  status?: number | undefined;
  /** The bridge's machine code, when it sent one. */
  code?: ErrorCode | undefined;
  /** The sandbox id of the call, when the error belongs to one. */
  sandboxId?: string | undefined;
  /** Sending the same request again is safe and may succeed (default false). */
  retryable?: boolean | undefined;
  /** The command may have started on the bridge (default false). */
  mayHaveRun?: boolean | undefined;
  /** The bridge's own text for the failure, redacted (see `RemoteTaskError.bridgeMessage`). */
  bridgeMessage?: string | undefined;
}

/**
 * Base of every error the client throws. Use `RemoteTaskError.isInstance(e)` (or the subclass's
 * own `isInstance`) rather than `instanceof`: it works across duplicate installs of the package.
 *
 * `retryable` and `mayHaveRun` say what may be done next: a retryable error (connection refused
 * before anything was sent, 429, 503 `capacity_exceeded`) never ran and may be sent again, which
 * the client does itself within its retry policy; an error that `mayHaveRun` (a timeout, a broken
 * connection, a bridge failure after it accepted the call) must not be re-sent blindly, since the
 * command could run twice.
 */
export class RemoteTaskError extends Error {
  /** Stable name of the failure kind: the error's `name`. */
  static readonly kind: string = "RemoteTaskError";
  /**
   * True for errors of this class or a subclass, from any copy of the package; a subclass's own
   * check (`TimeoutError.isInstance`) is true only for that subclass and its subclasses.
   */
  static readonly isInstance = brandClass(this, "remote-task.RemoteTaskError");
  readonly status: number | undefined;
  readonly code: ErrorCode | undefined;
  readonly sandboxId: string | undefined;
  /** Sending the same request again is safe (the command never ran) and may succeed. */
  readonly retryable: boolean;
  /** The command may have started on the bridge: sending it again could run it twice. */
  readonly mayHaveRun: boolean;
  /**
   * The bridge's own text for the failure, as it sent it: the `error` of its error answer (or of
   * a stream `error` event), or for a bridge that answers a failure in the result shape, its
   * `stderr`. The token and `env` values are redacted; nothing is shortened. Undefined when the
   * bridge gave no text (an empty body) or the failure is not the bridge's answer.
   */
  readonly bridgeMessage: string | undefined;

  constructor(message: string, options: RemoteTaskErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const kind = (new.target as typeof RemoteTaskError).kind;
    this.name = kind;
    this.status = options.status;
    this.code = options.code;
    this.sandboxId = options.sandboxId;
    this.retryable = options.retryable ?? false;
    this.mayHaveRun = options.mayHaveRun ?? false;
    this.bridgeMessage = options.bridgeMessage;
  }
}

/** The client was configured wrongly (missing or invalid URL, bad option). */
export class ConfigurationError extends RemoteTaskError {
  static override readonly kind = "ConfigurationError";
  static override readonly isInstance = brandClass(this, "remote-task.ConfigurationError");
}

/** The bridge refused the token (HTTP 401). */
export class AuthenticationError extends RemoteTaskError {
  static override readonly kind = "AuthenticationError";
  static override readonly isInstance = brandClass(this, "remote-task.AuthenticationError");
}

/** The bridge refused the request as invalid (HTTP 400/404/405/409/413). */
export class InvalidRequestError extends RemoteTaskError {
  static override readonly kind = "InvalidRequestError";
  static override readonly isInstance = brandClass(this, "remote-task.InvalidRequestError");
  readonly issues: readonly Issue[];
  constructor(
    message: string,
    options: RemoteTaskErrorOptions & { issues?: readonly Issue[] | undefined } = {},
  ) {
    super(message, options);
    this.issues = options.issues ?? [];
  }
}

/**
 * The bridge refused the call because it asks for more than the bridge's deployer allows (HTTP 403
 * `forbidden`): today, more network access than the bridge's ceiling (`network.ceiling` in its
 * `/health`). The command did not run; sending the same request again fails the same way.
 */
export class ForbiddenError extends RemoteTaskError {
  static override readonly kind = "ForbiddenError";
  static override readonly isInstance = brandClass(this, "remote-task.ForbiddenError");
}

/** The bridge had no capacity (HTTP 503 `capacity_exceeded` or 429), after the retry budget. */
export class CapacityError extends RemoteTaskError {
  static override readonly kind = "CapacityError";
  static override readonly isInstance = brandClass(this, "remote-task.CapacityError");
  readonly retryAfterSeconds: number | undefined;
  constructor(
    message: string,
    options: RemoteTaskErrorOptions & { retryAfterSeconds?: number | undefined } = {},
  ) {
    super(message, options);
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** The bridge failed (HTTP 5xx other than capacity), e.g. the sandbox could not be started. */
export class BridgeError extends RemoteTaskError {
  static override readonly kind = "BridgeError";
  static override readonly isInstance = brandClass(this, "remote-task.BridgeError");
}

/** The bridge answered something that is not the protocol (wrong shape, not JSON, too large). */
export class ProtocolError extends RemoteTaskError {
  static override readonly kind = "ProtocolError";
  static override readonly isInstance = brandClass(this, "remote-task.ProtocolError");
  /** Paths of the fields that did not match the protocol schema. */
  readonly paths: ReadonlyArray<ReadonlyArray<string | number>>;
  constructor(
    message: string,
    options: RemoteTaskErrorOptions & {
      paths?: ReadonlyArray<ReadonlyArray<string | number>> | undefined;
    } = {},
  ) {
    super(message, options);
    this.paths = options.paths ?? [];
  }
}

/** The bridge could not be reached, or the connection broke. */
export class ConnectionError extends RemoteTaskError {
  static override readonly kind = "ConnectionError";
  static override readonly isInstance = brandClass(this, "remote-task.ConnectionError");
}

/** The call's client-side deadline passed (the bridge stalled or was too slow). */
export class TimeoutError extends RemoteTaskError {
  static override readonly kind = "TimeoutError";
  static override readonly isInstance = brandClass(this, "remote-task.TimeoutError");
}

/** The caller aborted the call through its `AbortSignal`. */
export class AbortError extends RemoteTaskError {
  static override readonly kind = "AbortError";
  static override readonly isInstance = brandClass(this, "remote-task.AbortError");
}
