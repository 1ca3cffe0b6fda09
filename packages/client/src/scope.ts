import { timerDelay } from "@remote-task/internal";
import { AbortError, type RemoteTaskError, TimeoutError } from "./errors.js";

export interface ScopeOptions {
  /** The caller's signal; its abort ends the call with an `AbortError`. */
  signal?: AbortSignal | undefined;
  /** The whole call's deadline, in ms from now. */
  deadlineMs: number;
  sandboxId?: string | undefined;
  /** What the call is, for messages: "Running the command", "The health check". */
  what: string;
  /** The call runs a command (`/exec`): its progress decides `mayHaveRun` and the cancel on failure. */
  runsCommand?: boolean | undefined;
}

/**
 * How an exchange is ended early: `signal` aborts, and each `onAbort` listener is told right
 * after (a call's scope: plain callbacks, cheaper per request than listeners on the signal).
 */
export interface CallAbort {
  /** An AbortSignal for what needs one (made when first asked for). */
  readonly signal: AbortSignal;
  /** The abort's reason once it aborted, else undefined (without making the signal). */
  readonly reason: unknown;
  onAbort(listener: () => void): void;
}

/**
 * `promise`, or a rejection with the abort's reason as soon as `abort` ends it, even when what
 * `promise` waits for ignores the abort (as `raceAbort`, without a listener on the signal).
 */
export function raceCall<T>(promise: Promise<T>, abort: CallAbort): Promise<T> {
  if (abort.reason !== undefined) {
    promise.catch(() => {});
    return Promise.reject(abort.reason);
  }
  return new Promise<T>((resolve, reject) => {
    abort.onAbort(() => reject(abort.reason));
    promise.then(resolve, reject);
  });
}

/**
 * Where a call stands, one phase at a time:
 * - `waiting`: waiting for room on a bridge; its deadline then ends it with how long it waited;
 * - `unsent`: nothing sent yet, or the last try provably never left (nothing runs);
 * - `sent`: a request is on its way and not yet answered: the command may run;
 * - `answered`: the bridge answered 2xx and the outcome is being read: the command may be running;
 * - `settled`: the outcome is known (an error answer, the result, an `exit` or `error` event).
 *
 * Transitions: unsent -> waiting -> unsent (room found) -> sent -> answered -> settled; sent ->
 * settled (an error answer); sent, answered or settled -> unsent when the try provably did not
 * run and the call tries again.
 */
type Phase = "waiting" | "unsent" | "sent" | "answered" | "settled";

/**
 * The life of one call: an AbortController that ends every exchange of the call, aborted with
 * the error the call must end with (caller abort, deadline, idle stream, oversized body), and
 * the call's phase, which says whether its command may have run or may still be running.
 */
export class CallScope implements CallAbort {
  /** Its signal is made only when something asks for it: most calls end without one. */
  readonly #controller = new AbortController();
  #reason: RemoteTaskError | undefined;
  readonly #callerSignal: AbortSignal | undefined;
  readonly #onCallerAbort = () =>
    this.abort(
      new AbortError(
        `${this.what} was aborted by the caller.`,
        this.#errorOptions(this.#callerSignal?.reason),
      ),
    );
  #deadlineTimer: ReturnType<typeof setTimeout>;
  readonly #deadlineMs: number;
  readonly #runsCommand: boolean;
  #phase: Phase = "unsent";
  /** While `waiting`: the error the deadline ends the call with instead of a `TimeoutError`. */
  #patience: (() => RemoteTaskError) | undefined;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #idleMs = 0;
  /** Told when the call is aborted: plain callbacks, cheaper per call than listeners on `signal`. */
  #onAbort: Array<() => void> | undefined;
  readonly what: string;
  readonly sandboxId: string | undefined;
  /** When the deadline passes, in `Date.now()` time. */
  deadlineAt: number;

  constructor(options: ScopeOptions) {
    this.what = options.what;
    this.sandboxId = options.sandboxId;
    this.#callerSignal = options.signal;
    this.#runsCommand = options.runsCommand === true;
    this.#deadlineMs = options.deadlineMs;
    this.deadlineAt = Date.now() + options.deadlineMs;
    this.#deadlineTimer = this.#startDeadline();
    if (this.#callerSignal?.aborted) this.#onCallerAbort();
    else this.#callerSignal?.addEventListener("abort", this.#onCallerAbort, { once: true });
  }

  #startDeadline(): ReturnType<typeof setTimeout> {
    const seconds = Math.round(this.#deadlineMs / 100) / 10;
    return setTimeout(
      () =>
        this.abort(
          (this.#phase === "waiting" ? this.#patience?.() : undefined) ??
            new TimeoutError(
              `${this.what} did not finish within ${seconds}s (the task timeout plus the grace period); the bridge may be stalled or unreachable. Raise timeoutSeconds or graceSeconds if the task needs longer.`,
              this.#errorOptions(undefined),
            ),
        ),
      timerDelay(this.#deadlineMs),
    );
  }

  /**
   * The call's request is sent again after waiting for room: its whole deadline starts again, so
   * the command gets all of its timeout however long the wait was.
   */
  restartDeadline(): void {
    if (this.#reason !== undefined) return;
    clearTimeout(this.#deadlineTimer);
    this.deadlineAt = Date.now() + this.#deadlineMs;
    this.#deadlineTimer = this.#startDeadline();
  }

  #errorOptions(cause: unknown) {
    return { sandboxId: this.sandboxId, cause, mayHaveRun: this.mayHaveRun };
  }

  /**
   * The call waits for room on a bridge; `patience` is the error its deadline then ends it with
   * (how long it waited and why).
   */
  waitForRoom(patience: () => RemoteTaskError): void {
    this.#phase = "waiting";
    this.#patience = patience;
  }

  /** The call stopped waiting for room (it found some, or its wait ended): nothing is sent yet. */
  stopWaiting(): void {
    if (this.#phase === "waiting") this.#phase = "unsent";
    this.#patience = undefined;
  }

  /** A request of the call is on its way: from now on its command may run. */
  sent(): void {
    this.#phase = "sent";
  }

  /** The request provably never left, or the bridge refused it unrun: nothing runs. */
  unsent(): void {
    this.#phase = "unsent";
  }

  /** The bridge answered the request 2xx; the outcome follows in the body. */
  answered(): void {
    this.#phase = "answered";
  }

  /** The bridge has given the call's outcome: nothing of it runs any more. */
  settled(): void {
    this.#phase = "settled";
  }

  /** The bridge answered the call's last request (with anything: a result, an error). */
  get wasAnswered(): boolean {
    return this.#phase === "answered" || this.#phase === "settled";
  }

  /** The whole deadline, in seconds (one decimal). */
  get deadlineSeconds(): number {
    return Math.round(this.#deadlineMs / 100) / 10;
  }

  /** The call runs a command (`/exec`). */
  get runsCommand(): boolean {
    return this.#runsCommand;
  }

  /** The command may have started (what the scope's own errors say as `mayHaveRun`). */
  get mayHaveRun(): boolean {
    return this.#runsCommand && this.#phase !== "unsent" && this.#phase !== "waiting";
  }

  /** The bridge may be running the command right now: a call ending now must cancel it. */
  get commandInFlight(): boolean {
    return this.#runsCommand && (this.#phase === "sent" || this.#phase === "answered");
  }

  /** What an error created for this call carries about it. */
  get facts(): { sandboxId: string | undefined; mayHaveRun: boolean } {
    return { sandboxId: this.sandboxId, mayHaveRun: this.mayHaveRun };
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The error the call was ended with, once it was. */
  get reason(): RemoteTaskError | undefined {
    return this.#reason;
  }

  abort(error: RemoteTaskError): void {
    if (this.#reason !== undefined) return;
    this.#reason = error;
    this.#controller.abort(error);
    const listeners = this.#onAbort;
    this.#onAbort = undefined;
    if (listeners !== undefined) for (const listener of listeners) listener();
    this.dispose();
  }

  /**
   * Calls `listener` when the call is aborted, right after `signal` aborts (as a listener on it
   * would be, without one per call); never when the call was aborted already.
   */
  onAbort(listener: () => void): void {
    if (this.#reason !== undefined) return;
    this.#onAbort ??= [];
    this.#onAbort.push(listener);
  }

  /** Starts (or restarts) the idle watchdog: the call fails if `touch()` is not called in time. */
  watchIdle(idleMs: number): void {
    this.#idleMs = idleMs;
    this.touch();
  }

  touch(): void {
    if (this.#idleMs === 0 || this.#reason !== undefined) return;
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
      timerDelay(this.#idleMs),
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
