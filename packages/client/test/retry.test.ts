import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { RetryPolicy } from "../src/config.js";
import { connectionFailure, errorFromBody, errorFromResponse } from "../src/error-mapping.js";
import { CapacityError, ConnectionError } from "../src/errors.js";
import {
  backoffDelay,
  parseRetryAfter,
  provablyNotRun,
  sendWithRetries,
  type Tries,
} from "../src/retry.js";
import { Secrets } from "../src/secrets.js";
import { sseEvents } from "../src/sse.js";
import { fullResult, sse } from "./helpers/fixtures.js";

const policy: RetryPolicy = {
  maxAttempts: 5,
  initialDelayMs: 100,
  maxDelayMs: 1_000,
  maxTotalMs: 10_000,
  patient: true,
  onRetry: undefined,
};

/** The one retry loop at one target, the way a named bridge's requests use it. */
function tryAtOne<T>(
  retry: RetryPolicy,
  attempt: () => Promise<T>,
  more: Partial<Tries<string, T>> = {},
): Promise<T> {
  return sendWithRetries({
    policy: retry,
    abort: { signal: new AbortController().signal, reason: undefined },
    deadlineAt: Date.now() + 60_000,
    patient: false,
    sleeps: true,
    target: () => "bridge",
    attempt,
    notRun: () => {},
    ...more,
  });
}

describe("Retry-After", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  it.each([
    ["0", 0],
    ["7", 7_000],
    [" 120 ", 120_000],
    ["Thu, 01 Jan 2026 00:00:05 GMT", 5_000],
    ["Wed, 31 Dec 2025 23:59:00 GMT", 0],
    ["soon", undefined],
    ["-3", undefined],
    ["1.5", undefined],
    [undefined, undefined],
  ])("%s -> %s ms", (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });
});

describe("backoff", () => {
  it("stays within [half, all] of the capped exponential delay", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempt, r) => {
          const cap = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1));
          const delay = backoffDelay(policy, attempt, () => r);
          expect(delay).toBeGreaterThanOrEqual(cap / 2);
          expect(delay).toBeLessThanOrEqual(cap);
        },
      ),
    );
  });

  it("stops when the total waiting budget would be exceeded", async () => {
    let attempts = 0;
    const tight = { ...policy, initialDelayMs: 1, maxTotalMs: 50 };
    const error = new CapacityError("full", { retryable: true, retryAfterSeconds: 0.03 });
    await expect(
      tryAtOne(tight, async () => {
        attempts++;
        throw error;
      }),
    ).rejects.toBe(error);
    // 30 ms once fits in 50 ms, twice does not.
    expect(attempts).toBe(2);
  });

  it("does not retry anything that is not a retryable error", async () => {
    let attempts = 0;
    const boom = new Error("boom");
    await expect(
      tryAtOne(policy, async () => {
        attempts++;
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(attempts).toBe(1);
  });
});

describe("SSE parsing", () => {
  const events = [
    { type: "start", sandboxId: "mikan-task-1", protocol: 1 },
    { type: "stdout", data: "héllo 💥\nsecond line\r\n" },
    { type: "heartbeat", elapsedMs: 15_000 },
    { type: "stderr", data: "data: not a field\n\n" },
    { type: "exit", result: fullResult },
  ] as const;
  const wire = new TextEncoder().encode(events.map((e) => sse(e)).join(""));

  it("yields the same events however the bytes are split", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.integer({ min: 1, max: wire.byteLength - 1 }), { maxLength: 12 }),
        async (cuts) => {
          const points = [0, ...cuts.sort((a, b) => a - b), wire.byteLength];
          const chunks = points.slice(1).map((end, i) => wire.subarray(points[i], end));
          async function* body() {
            yield* chunks;
          }
          const seen = [];
          for await (const event of sseEvents(body(), {
            signal: new AbortController().signal,
            maxEventChars: 1 << 20,
            status: 200,
            sandboxId: undefined,
            mayHaveRun: true,
          })) {
            seen.push(event);
          }
          expect(seen).toEqual(events);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("what is tried again", () => {
  it("only an error that is retryable and never ran", () => {
    const refused = new ConnectionError("refused", { retryable: true });
    expect(provablyNotRun(refused)).toBe(true);
    expect(provablyNotRun(new ConnectionError("broke", { mayHaveRun: true }))).toBe(false);
    expect(provablyNotRun(new CapacityError("full", { retryable: true, mayHaveRun: true }))).toBe(
      false,
    );
    expect(provablyNotRun(new CapacityError("full"))).toBe(false);
    expect(provablyNotRun(new Error("plain"))).toBe(false);
    expect(provablyNotRun({ retryable: true, mayHaveRun: false })).toBe(false);
  });

  it("while attempts are left", async () => {
    const quick = { ...policy, initialDelayMs: 1, maxDelayMs: 1, maxAttempts: 2 };
    let attempts = 0;
    const refused = new ConnectionError("refused", { retryable: true });
    await expect(
      tryAtOne(quick, async () => {
        attempts++;
        throw refused;
      }),
    ).rejects.toBe(refused);
    expect(attempts).toBe(2);
  });

  it("a patient call's refusals for capacity spend no attempt", async () => {
    const quick = { ...policy, initialDelayMs: 1, maxDelayMs: 1, maxAttempts: 2 };
    let attempts = 0;
    const full = new CapacityError("full", { retryable: true, retryAfterSeconds: 0 });
    const given: string[] = [];
    const answer = await tryAtOne(
      quick,
      async () => {
        attempts++;
        if (attempts <= 4) throw full;
        return "ran";
      },
      { patient: true, notRun: (_target, how) => given.push(how.kind) },
    );
    expect([answer, attempts]).toEqual(["ran", 5]);
    expect(given).toEqual(["refused", "refused", "refused", "refused"]);
  });

  it("gets its answer from the errors the client makes", () => {
    const facts = { sandboxId: "mikan-task-1", mayHaveRun: true };
    const context = {
      sandboxId: "mikan-task-1",
      secrets: new Secrets([]),
      token: { sent: true, source: "the `token` option" },
      retryAfterHeader: "2",
    };
    const refused = Object.assign(new Error("connect"), { code: "ECONNREFUSED" });
    // Refused before anything was sent: retried. The same code once an answer started: not.
    expect(provablyNotRun(connectionFailure(refused, true, facts))).toBe(true);
    expect(provablyNotRun(connectionFailure(refused, false, facts))).toBe(false);
    expect(provablyNotRun(connectionFailure(new Error("reset"), true, facts))).toBe(false);
    const capacity = new TextEncoder().encode(
      JSON.stringify({ error: "full", code: "capacity_exceeded" }),
    );
    const answer = { status: 503, contentType: "application/json" };
    const http = errorFromResponse(capacity, answer, context);
    expect([http.retryable, http.mayHaveRun, provablyNotRun(http)]).toEqual([true, false, true]);
    const tooMany = errorFromResponse(
      new Uint8Array(),
      { status: 429, contentType: undefined },
      context,
    );
    expect(provablyNotRun(tooMany)).toBe(true);
    // The same refusal as a stream's `error` event comes after the call was accepted.
    const event = errorFromBody(
      503,
      { error: "full", code: "capacity_exceeded" },
      {
        ...context,
        accepted: true,
      },
    );
    expect([event.retryable, event.mayHaveRun, provablyNotRun(event)]).toEqual([
      false,
      true,
      false,
    ]);
    const invalid = errorFromResponse(
      new TextEncoder().encode(JSON.stringify({ error: "bad", code: "invalid_request" })),
      { status: 400, contentType: "application/json" },
      context,
    );
    expect([invalid.retryable, invalid.mayHaveRun]).toEqual([false, false]);
    const failed = errorFromResponse(
      new TextEncoder().encode(JSON.stringify({ error: "boom", code: "sandbox_error" })),
      { status: 502, contentType: "application/json" },
      context,
    );
    expect([failed.retryable, failed.mayHaveRun]).toEqual([false, true]);
  });
});
