import type { RetryPolicy } from "./config.js";
import type { RemoteTaskError } from "./errors.js";
import { sleep } from "./scope.js";

/**
 * Thrown by an attempt whose request provably did not run (connection refused, DNS failure,
 * 429, 503 `capacity_exceeded`); `error` is what the call ends with when no retry is left.
 */
export class Retryable {
  constructor(
    readonly error: RemoteTaskError,
    readonly retryAfterMs: number | undefined,
  ) {}
}

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
 * Runs `attempt` until it succeeds, fails for good, or the retry budget is spent. Only a
 * `Retryable` is tried again; the wait honours the bridge's `Retry-After` and stops at once when
 * `signal` aborts (its reason is thrown). A wait that would end after `deadlineAt` (the call's
 * deadline) is not started: the call ends with the last error instead.
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
    } catch (thrown) {
      if (!(thrown instanceof Retryable)) throw thrown;
      if (signal.aborted) throw signal.reason;
      if (number >= policy.maxAttempts) throw thrown.error;
      const delayMs = Math.max(backoffDelay(policy, number), thrown.retryAfterMs ?? 0);
      if (waitedMs + delayMs > policy.maxTotalMs) throw thrown.error;
      if (Date.now() + delayMs >= deadlineAt) throw thrown.error;
      policy.onRetry?.({ attempt: number, delayMs, error: thrown.error });
      await sleep(delayMs, signal);
      waitedMs += delayMs;
    }
  }
}
