import { AbortError, type RemoteTaskError, TimeoutError } from "./errors.js";

export interface ScopeOptions {
  /** The caller's signal; its abort ends the call with an `AbortError`. */
  signal?: AbortSignal | undefined;
  /** The whole call's deadline, in ms from now. */
  deadlineMs: number;
  sandboxId?: string | undefined;
  /** What the call is, for messages: "Running the command", "The health check". */
  what: string;
}

/** Longest delay a timer can hold (2^31 - 1 ms, about 24.8 days); longer ones would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The life of one call: an AbortController that ends every exchange of the call, aborted with
 * the error the call must end with (caller abort, deadline, idle stream, oversized body).
 */
export class CallScope {
  readonly #controller = new AbortController();
  readonly #callerSignal: AbortSignal | undefined;
  readonly #onCallerAbort = () =>
    this.abort(
      new AbortError(
        `${this.what} was aborted by the caller.`,
        this.#errorOptions(this.#callerSignal?.reason),
      ),
    );
  readonly #deadlineTimer: ReturnType<typeof setTimeout>;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #idleMs = 0;
  readonly what: string;
  readonly sandboxId: string | undefined;
  /** When the deadline passes, in `Date.now()` time. */
  readonly deadlineAt: number;

  constructor(options: ScopeOptions) {
    this.what = options.what;
    this.sandboxId = options.sandboxId;
    this.#callerSignal = options.signal;
    this.deadlineAt = Date.now() + options.deadlineMs;
    const seconds = Math.round(options.deadlineMs / 100) / 10;
    this.#deadlineTimer = setTimeout(
      () =>
        this.abort(
          new TimeoutError(
            `${this.what} did not finish within ${seconds}s (the task timeout plus the grace period); the bridge may be stalled or unreachable. Raise timeoutSeconds or graceSeconds if the task needs longer.`,
            this.#errorOptions(undefined),
          ),
        ),
      Math.min(options.deadlineMs, MAX_TIMER_MS),
    );
    if (this.#callerSignal?.aborted) this.#onCallerAbort();
    else this.#callerSignal?.addEventListener("abort", this.#onCallerAbort, { once: true });
  }

  #errorOptions(cause: unknown): { sandboxId?: string; cause?: unknown } {
    const options: { sandboxId?: string; cause?: unknown } = {};
    if (this.sandboxId !== undefined) options.sandboxId = this.sandboxId;
    if (cause !== undefined) options.cause = cause;
    return options;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The error the call was ended with, once it was. */
  get reason(): RemoteTaskError | undefined {
    return this.#controller.signal.aborted
      ? (this.#controller.signal.reason as RemoteTaskError)
      : undefined;
  }

  abort(error: RemoteTaskError): void {
    if (this.#controller.signal.aborted) return;
    this.#controller.abort(error);
    this.dispose();
  }

  /** Starts (or restarts) the idle watchdog: the call fails if `touch()` is not called in time. */
  watchIdle(idleMs: number): void {
    this.#idleMs = idleMs;
    this.touch();
  }

  touch(): void {
    if (this.#idleMs === 0 || this.#controller.signal.aborted) return;
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    const seconds = Math.round(this.#idleMs / 100) / 10;
    this.#idleTimer = setTimeout(
      () =>
        this.abort(
          new TimeoutError(
            `${this.what} stopped receiving events from the bridge for ${seconds}s (not even heartbeats); the stream stalled. Check the bridge and any proxy in between.`,
            this.#errorOptions(undefined),
          ),
        ),
      Math.min(this.#idleMs, MAX_TIMER_MS),
    );
  }

  dispose(): void {
    clearTimeout(this.#deadlineTimer);
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    this.#idleMs = 0;
    this.#callerSignal?.removeEventListener("abort", this.#onCallerAbort);
  }
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
