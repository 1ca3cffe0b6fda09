/**
 * Retrying what provably did not run. Two kinds of wait: the retry budget (`RetryPolicy`: attempts
 * and total wait) for an unreachable bridge, and patience for a call refused for capacity, which
 * waits for room until the call's own deadline however many refusals that takes (see the client
 * README, "Capacity"). Nothing that may have run is ever sent again.
 */
import type { RetryPolicy } from "./config.js";
import { CapacityError, RemoteTaskError } from "./errors.js";
import { type CallAbort, type CallScope, sleep } from "./scope.js";

/**
 * `Retry-After` as milliseconds: delta-seconds or an HTTP date (RFC 9110 section 10.2.3).
 * Unparseable values are ignored; a date in the past means "now".
 */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!/[a-z]/i.test(text)) return undefined;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

/** Exponential backoff with "equal jitter": half fixed, half random, capped by `maxDelayMs`. */
export function backoffDelay(policy: RetryPolicy, attempt: number, random = Math.random): number {
  const exponential = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1));
  return exponential / 2 + random() * (exponential / 2);
}

/** Longest extra wait, as a share of the bridge's `Retry-After`, that jitter adds. */
const RETRY_AFTER_JITTER = 0.2;

/**
 * How long a call refused for capacity (refusal number `refusal`) leaves that bridge alone: the
 * bridge's `Retry-After` plus up to a fifth more, so a refused burst does not come back at once
 * in step, and never less than the backoff.
 */
function capacityDelay(
  policy: RetryPolicy,
  error: CapacityError,
  refusal: number,
  random = Math.random,
): number {
  const backoff = backoffDelay(policy, refusal, random);
  const seconds = error.retryAfterSeconds;
  if (seconds === undefined) return backoff;
  return Math.max(backoff, seconds * 1000 * (1 + RETRY_AFTER_JITTER * random()));
}

/**
 * The error of a call whose deadline passed while it waited for room: how long it waited and why
 * (the bridges' refusals, or the client holding it back while its own calls filled them). The
 * command never ran, so it may be sent again.
 */
export function outOfPatience(
  scope: CallScope,
  refusals: readonly CapacityError[],
  waitedMs: number,
  /** The wait ends before the deadline: no bridge will have room by then. */
  early = false,
): CapacityError {
  const last = refusals.at(-1);
  const waited = `${Math.round(waitedMs / 100) / 10} s`;
  const deadline = `its deadline (${scope.deadlineSeconds} s: the task timeout plus the grace period)`;
  const ending = early
    ? `no bridge will have room before ${deadline}, so it stopped waiting; the command never ran.`
    : `${deadline} passed before there was room, and the command never ran.`;
  const advice =
    "Give calls more time (timeoutSeconds, graceSeconds), run fewer at once, or add a bridge (the `bridges` option).";
  let why: string;
  if (last === undefined) {
    why = `${scope.what} waited ${waited} for room on the bridge (this client's calls in flight already filled what it takes); ${ending}`;
  } else {
    const label = `HTTP ${last.status ?? "?"}${last.code === undefined ? "" : ` ${last.code}`}`;
    const words = last.bridgeMessage ? `: ${last.bridgeMessage.replace(/\.\s*$/, "")}` : "";
    const suggests =
      last.retryAfterSeconds === undefined
        ? ""
        : `; the bridge suggests after ${last.retryAfterSeconds}s`;
    const times = `${refusals.length} ${refusals.length === 1 ? "time" : "times"}`;
    why = `${scope.what} was refused for capacity ${times} over ${waited} (last: ${label}${words}${suggests}); ${ending}`;
  }
  return new CapacityError(`${why} ${advice}`, {
    status: last?.status,
    code: last?.code,
    bridgeMessage: last?.bridgeMessage,
    retryAfterSeconds: last?.retryAfterSeconds,
    sandboxId: scope.sandboxId,
    retryable: true,
    mayHaveRun: false,
  });
}

/** True for an error that proves its request did not run and that says trying again may work. */
export function provablyNotRun(error: unknown): error is RemoteTaskError {
  return RemoteTaskError.isInstance(error) && error.retryable && !error.mayHaveRun;
}

/** What a try that provably did not run tells the bridge it went to (see `BridgePool.release`). */
type NotRun =
  | { kind: "refused"; delayMs: number }
  | { kind: "unreachable"; delayMs: number }
  | { kind: "ended" };

/** The request-specific parts of {@link sendWithRetries}. */
export interface Tries<Target, T> {
  policy: RetryPolicy;
  /** The call's abort: once it aborted, nothing is tried again. */
  abort: Pick<CallAbort, "signal" | "reason">;
  /** No wait is started that would end at or after this time (`Date.now()`). */
  deadlineAt: number;
  /**
   * Refusals for capacity wait for room until the deadline, however many there are, instead of
   * spending the retry budget (exec calls of a patient policy).
   */
  patient: boolean;
  /** Where try number `number` goes; it may wait for room there (after `refusals`). */
  target(number: number, refusals: readonly CapacityError[]): Promise<Target> | Target;
  /** One try; resolves with the answer or throws its error. */
  attempt(target: Target, number: number): Promise<T>;
  /**
   * A try at `target` provably did not run: `ended` when the call gives up, else how long that
   * target is left alone. The next `target()` waits for it when `sleeps` is false.
   */
  notRun(target: Target, how: NotRun): void;
  /** The loop sleeps the delay itself (a request to one named bridge). */
  sleeps: boolean;
  /** Told of each refusal for capacity, all of them so far; it may end the call by throwing. */
  onRefused?: ((refusals: readonly CapacityError[]) => void) | undefined;
}

/**
 * The one retry loop of every request: tries `attempt` until it answers, fails in a way that may
 * have run (never sent again), or the retry budget is spent (attempts and total wait; a
 * refusal for capacity of a patient call spends none of it and waits until the deadline). The
 * wait honours the bridge's `Retry-After` with jitter and stops when the call aborts. A wait
 * that would end after the deadline is not started: the call ends with the last error.
 */
export async function sendWithRetries<Target, T>(tries: Tries<Target, T>): Promise<T> {
  const { policy } = tries;
  const refusals: CapacityError[] = [];
  let failures = 0;
  let waitedMs = 0;
  for (let number = 1; ; number++) {
    // A target known at once is tried at once (no turn of the event loop per call).
    const next = tries.target(number, refusals);
    const target = next instanceof Promise ? await next : next;
    try {
      return await tries.attempt(target, number);
    } catch (error) {
      if (!provablyNotRun(error) || tries.abort.reason !== undefined) throw error;
      const refused = CapacityError.isInstance(error);
      const patient = refused && tries.patient;
      if (!patient) failures++;
      const delayMs = refused
        ? capacityDelay(policy, error, refusals.length + 1)
        : backoffDelay(policy, failures);
      if (
        !patient &&
        (failures >= policy.maxAttempts ||
          waitedMs + delayMs > policy.maxTotalMs ||
          Date.now() + delayMs >= tries.deadlineAt)
      ) {
        tries.notRun(target, { kind: "ended" });
        throw error;
      }
      tries.notRun(target, { kind: refused ? "refused" : "unreachable", delayMs });
      if (refused) {
        refusals.push(error);
        tries.onRefused?.(refusals);
      }
      if (!patient) waitedMs += delayMs;
      policy.onRetry?.({ attempt: number, delayMs, error });
      if (tries.sleeps) await sleep(delayMs, tries.abort.signal);
    }
  }
}
