/**
 * Retrying what provably did not run. Two kinds of wait: the retry budget (`RetryPolicy`: attempts
 * and total wait) for an unreachable bridge, and patience for a call refused for capacity, which
 * waits for room until the call's own deadline however many refusals that takes (see the client
 * README, "Capacity"). Nothing that may have run is ever sent again.
 */
import type { RetryPolicy } from "./config.js";
import { CapacityError, RemoteTaskError } from "./errors.js";
import { type CallScope, sleep } from "./scope.js";

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
export function capacityDelay(
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

/**
 * Whether the request that failed with `error` on attempt number `attempt` is sent again: only an
 * error that says it is retryable and that the command never ran, while attempts are left.
 */
export function shouldRetry(error: unknown, attempt: number, policy: RetryPolicy): boolean {
  return (
    RemoteTaskError.isInstance(error) &&
    error.retryable &&
    !error.mayHaveRun &&
    attempt < policy.maxAttempts
  );
}

/** The bridge's `Retry-After` of a capacity refusal, in ms. */
function retryAfterMs(error: unknown): number {
  const seconds = CapacityError.isInstance(error) ? error.retryAfterSeconds : undefined;
  return seconds === undefined ? 0 : seconds * 1000;
}

/**
 * Runs `attempt` until it succeeds, fails for good, or the retry budget is spent; what is tried
 * again is `shouldRetry`'s decision. The wait honours the bridge's `Retry-After` and stops at once
 * when `signal` aborts (its reason is thrown). A wait that would end after `deadlineAt` (the
 * call's deadline) or exceed the policy's total is not started: the call ends with the last error.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  signal: AbortSignal,
  deadlineAt: number,
  attempt: (number: number) => Promise<T>,
): Promise<T> {
  let waitedMs = 0;
  for (let number = 1; ; number++) {
    try {
      return await attempt(number);
    } catch (error) {
      if (!shouldRetry(error, number, policy)) throw error;
      if (signal.aborted) throw signal.reason;
      const delayMs = Math.max(backoffDelay(policy, number), retryAfterMs(error));
      if (waitedMs + delayMs > policy.maxTotalMs) throw error;
      if (Date.now() + delayMs >= deadlineAt) throw error;
      policy.onRetry?.({ attempt: number, delayMs, error: error as RemoteTaskError });
      await sleep(delayMs, signal);
      waitedMs += delayMs;
    }
  }
}
