import type { RetryPolicy } from "./config.js";
import { CapacityError, RemoteTaskError } from "./errors.js";
import { sleep } from "./scope.js";

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
