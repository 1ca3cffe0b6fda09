/**
 * Calls refused for capacity: patient calls (wait for room until the deadline), several bridges
 * (spill-over, cancel reaching the bridge that took the call), and runMany's adaptive window.
 */

import { silentLogger } from "@remote-task/bridge";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createFakeBackend, type FakeBackend } from "@remote-task/bridge/testing";
import { HttpResponse, http } from "msw";
import { afterEach, describe, expect, it } from "vitest";
import { CapacityError, createClient, type RetryInfo } from "../src/index.js";
import { FanOutWindow } from "../src/run-many.js";
import { failure } from "./helpers/assertions.js";
import { capacityBody, execResult, fullResult } from "./helpers/fixtures.js";
import { mswFetch } from "./helpers/msw.js";

const A = "https://a.bridge.test";
const B = "https://b.bridge.test";
const quickRetry = { initialDelayMs: 5, maxDelayMs: 20 };

/** A bridge (at `base`) refusing every exec with 429 and `Retry-After: retryAfter`. */
function refusing(base: string, retryAfter = "0") {
  return http.post(`${base}/exec`, () =>
    HttpResponse.json(
      { error: "full", code: "capacity_exceeded" },
      { status: 429, headers: { "retry-after": retryAfter } },
    ),
  );
}

const execCount = (f: { requests: Request[] }, base = "") =>
  f.requests.filter((r) => r.url.startsWith(base) && new URL(r.url).pathname === "/exec").length;

describe("patient calls", () => {
  it("a bridge that refuses forever: the call waits until its deadline, then says how long and why", async () => {
    const f = mswFetch(refusing(A));
    const c = createClient({
      url: A,
      fetch: f,
      timeoutSeconds: 0.3,
      graceSeconds: 0.3,
      retry: quickRetry,
    });
    const started = Date.now();
    const error = (await failure(c.run("echo hi"))) as CapacityError;
    const took = Date.now() - started;
    expect(CapacityError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/was refused for capacity \d+ times over \d+(\.\d)? s/);
    expect(error.message).toMatch(
      /its deadline \(0\.6 s: the task timeout plus the grace period\).*the command never ran/,
    );
    expect(error.mayHaveRun).toBe(false);
    expect(error.retryable).toBe(true);
    expect(error.status).toBe(429);
    // Well past the retry budget's 4 attempts: patience is bounded by the deadline, not attempts.
    expect(execCount(f)).toBeGreaterThan(4);
    expect(took).toBeGreaterThanOrEqual(550);
  });

  it("a deadline reached while waiting behind the client's own calls: how long it waited and why", async () => {
    let running = 0;
    const f = mswFetch(
      http.post(`${A}/exec`, async () => {
        if (running >= 1) {
          return HttpResponse.json(
            { error: "full", code: "capacity_exceeded" },
            { status: 429, headers: { "retry-after": "0" } },
          );
        }
        running++;
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        running--;
        return HttpResponse.json(fullResult);
      }),
    );
    const c = createClient({ url: A, fetch: f, retry: quickRetry, graceSeconds: 0.3 });
    const long = c.run("sleep 1.5");
    await expect.poll(() => running).toBe(1);
    const started = Date.now();
    const error = (await failure(c.run("echo hi", { timeoutSeconds: 0.2 }))) as CapacityError;
    expect(CapacityError.isInstance(error)).toBe(true);
    // Refused once, then held back (the bridge's one slot is this client's) until the deadline.
    expect(error.message).toMatch(/refused for capacity 1 time over/);
    expect(error.message).toMatch(/its deadline \(0\.5 s[^)]*\) passed before there was room/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(450);
    expect(execCount(f)).toBe(2);
    await long;
  });

  it("a deadline that comes before the bridge's Retry-After ends the wait at once", async () => {
    const f = mswFetch(refusing(A, "30"));
    const c = createClient({ url: A, fetch: f, timeoutSeconds: 1, graceSeconds: 1 });
    const error = (await failure(c.run("echo hi"))) as CapacityError;
    expect(error.message).toMatch(/refused for capacity 1 time over .*suggests after 30s/);
    // Said when the wait ends before the deadline; a wait until the deadline says it "passed".
    expect(error.message).toMatch(/no bridge will have room before its deadline/);
    expect(error.message).not.toMatch(/passed before there was room/);
    expect(error.retryAfterSeconds).toBe(30);
    expect(execCount(f)).toBe(1);
  });

  it("waits past the retry budget and succeeds; the command gets its whole timeout after the wait", async () => {
    let refused = 0;
    const retries: RetryInfo[] = [];
    const f = mswFetch(
      http.post(`${A}/exec`, async () => {
        if (refused < 6) {
          refused++;
          return HttpResponse.json(
            { ...capacityBody, retryAfterSeconds: 0.06 },
            { status: 503, headers: {} },
          );
        }
        // Runs longer than the call's deadline less the time already spent waiting.
        await new Promise((resolve) => setTimeout(resolve, 500));
        return HttpResponse.json(fullResult);
      }),
    );
    const c = createClient({
      url: A,
      fetch: f,
      timeoutSeconds: 0.4,
      graceSeconds: 0.3,
      retry: { ...quickRetry, maxAttempts: 2, onRetry: (info) => retries.push(info) },
    });
    const result = await c.run("echo hi");
    expect(result.exitCode).toBe(fullResult.code);
    expect(execCount(f)).toBe(7);
    expect(retries).toHaveLength(6);
    expect(retries.every((r) => CapacityError.isInstance(r.error))).toBe(true);
    // Retry-After (60 ms) with jitter, never below it.
    expect(retries.every((r) => r.delayMs >= 60 && r.delayMs <= 72.1)).toBe(true);
  });

  it("retry.patient false keeps capacity refusals within the retry budget", async () => {
    const f = mswFetch(refusing(A));
    const c = createClient({
      url: A,
      fetch: f,
      retry: { ...quickRetry, maxAttempts: 3, patient: false },
    });
    const error = await failure(c.run("x"));
    expect(CapacityError.isInstance(error)).toBe(true);
    expect(execCount(f)).toBe(3);
  });
});

describe("several bridges", () => {
  it("spill-over: a refused call goes to the next bridge at once, an answered one stays", async () => {
    const f = mswFetch(
      refusing(A, "5"),
      http.post(`${B}/exec`, () => HttpResponse.json(execResult({ stdout: "from b\n" }))),
    );
    const c = createClient({
      bridges: [
        { url: A, token: "ta" },
        { url: B, token: "tb" },
      ],
      fetch: f,
    });
    const result = await c.run("echo hi");
    expect(result.stdout).toBe("from b\n");
    const [toA, toB] = f.requests.filter((r) => new URL(r.url).pathname === "/exec");
    expect(toA?.headers.get("authorization")).toBe("Bearer ta");
    expect(toB?.headers.get("authorization")).toBe("Bearer tb");
    // The same call, the same id: it ran on B only.
    expect((await (toA as Request).json()).sandboxId).toBe(
      (await (toB as Request).json()).sandboxId,
    );
    // A stays closed (Retry-After 5 s): the next call goes straight to B.
    await c.run("echo again");
    expect(execCount(f, A)).toBe(1);
    expect(execCount(f, B)).toBe(2);
  });

  it("every bridge full: the call fails when its deadline comes, having tried each", async () => {
    const f = mswFetch(refusing(A), refusing(B));
    const c = createClient({
      bridges: [{ url: A }, { url: B }],
      fetch: f,
      timeoutSeconds: 0.2,
      graceSeconds: 0.2,
      retry: quickRetry,
    });
    const error = (await failure(c.run("echo hi"))) as CapacityError;
    expect(CapacityError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/refused for capacity \d+ times/);
    expect(execCount(f, A)).toBeGreaterThan(1);
    expect(execCount(f, B)).toBeGreaterThan(1);
  });

  it("a call that may have run is never sent to another bridge", async () => {
    const f = mswFetch(
      http.post(`${A}/exec`, () =>
        HttpResponse.json({ error: "boom", code: "internal" }, { status: 500 }),
      ),
      http.post(`${B}/exec`, () => HttpResponse.json(fullResult)),
    );
    const c = createClient({ bridges: [{ url: A }, { url: B }], fetch: f });
    const error = await failure(c.run("echo hi"));
    expect(error.mayHaveRun).toBe(true);
    expect(execCount(f, B)).toBe(0);
  });

  it("options name their bridge; url and bridges together are refused", () => {
    expect(() => createClient({ bridges: [] })).toThrow(/non-empty array/);
    expect(() => createClient({ bridges: [{ url: "ftp://x" }] })).toThrow(/bridges\[0\]\.url/);
    expect(() => createClient({ url: A, bridges: [{ url: B }] })).toThrow(/not both/);
    expect(() =>
      createClient({ bridges: [{ url: A, tokn: "x" } as unknown as { url: string }] }),
    ).toThrow(/bridges\[0\] has no option `tokn`/);
  });
});

describe("two real bridges, the first at capacity (loopback)", () => {
  const bridges: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    await Promise.all(bridges.splice(0).map((b) => b.close()));
  });

  async function pair(first: { maxConcurrent: number; maxQueued: number }) {
    const backends: FakeBackend[] = [createFakeBackend(), createFakeBackend()];
    const started = await Promise.all([
      startEmbeddedBridge({ backend: backends[0], admission: first, logger: silentLogger }),
      startEmbeddedBridge({
        backend: backends[1],
        admission: { maxConcurrent: 64, maxQueued: 256 },
        logger: silentLogger,
      }),
    ]);
    bridges.push(...started);
    const client = createClient({
      bridges: started.map((b) => ({ url: b.url, token: b.token })),
    });
    return { client, backends: backends as [FakeBackend, FakeBackend] };
  }

  it("200 calls at once: 0 failures, each command ran exactly once", async () => {
    const { client, backends } = await pair({ maxConcurrent: 2, maxQueued: 2 });
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, (_, i) => client.run(`sleep 0.05; echo ${i}`)),
    );
    const failed = results.filter((r) => r.status === "rejected");
    expect(failed).toEqual([]);
    const values = results.map((r) => (r.status === "fulfilled" ? r.value : undefined));
    expect(values.map((v) => v?.stdout)).toEqual(Array.from({ length: 200 }, (_, i) => `${i}\n`));
    const runs = [...backends[0].starts, ...backends[1].starts].map((spec) => spec.sandboxId);
    expect(runs).toHaveLength(200);
    expect(new Set(runs).size).toBe(200);
    expect(new Set(runs)).toEqual(new Set(values.map((v) => v?.sandboxId)));
    // The first bridge took what it could; the rest spilled over.
    expect(backends[0].starts.length).toBeGreaterThan(0);
    expect(backends[1].starts.length).toBeGreaterThan(100);
    await client.close();
  });

  it("cancel reaches the bridge that took the call", async () => {
    const { client, backends } = await pair({ maxConcurrent: 1, maxQueued: 0 });
    const first = client.run("sleep 5");
    await expect.poll(() => backends[0].starts.length).toBe(1);
    const second = client.run("sleep 5");
    await expect.poll(() => backends[1].starts.length).toBe(1);
    const id = backends[1].starts[0]?.sandboxId as string;
    expect(await client.cancel(id)).toMatchObject({ cancelled: true, supported: true });
    expect((await second).outcome).toBe("cancelled");
    const firstId = backends[0].starts[0]?.sandboxId as string;
    expect(await client.cancel(firstId)).toMatchObject({ cancelled: true });
    expect((await first).outcome).toBe("cancelled");
    await client.close();
  });
});

describe("runMany's adaptive window", () => {
  it("grows from the start each round while nothing is refused, up to the ceiling", () => {
    const window = new FanOutWindow(40, undefined);
    expect(window.size).toBe(8);
    for (let i = 0; i < 8; i++) window.succeeded();
    expect(window.size).toBe(16);
    for (let i = 0; i < 100; i++) window.succeeded();
    expect(window.size).toBe(40);
  });

  it("starts from the capacity reported, halves once per window on refusals, grows slowly after", () => {
    const window = new FanOutWindow(64, 20);
    expect(window.size).toBe(20);
    window.refused();
    expect(window.size).toBe(10);
    for (let i = 0; i < 5; i++) window.refused();
    expect(window.size).toBe(10);
    for (let i = 0; i < 10; i++) window.succeeded();
    expect(window.size).toBe(10);
    window.refused();
    expect(window.size).toBe(5);
    for (let i = 0; i < 10; i++) window.refused();
    for (let i = 0; i < 30; i++) window.succeeded();
    expect(window.size).toBeGreaterThan(5);
    expect(window.size).toBeLessThan(12);
    const floor = new FanOutWindow(64, 0);
    floor.refused();
    expect(floor.size).toBe(1);
  });

  /** A bridge taking `capacity` calls at once and refusing more; counts in flight and refusals. */
  function boundedBridge(capacity: number, health: Record<string, unknown>) {
    const stats = { inFlight: 0, maxInFlight: 0, refused: 0, ran: 0 };
    const f = mswFetch(
      http.get(`${A}/health`, () => HttpResponse.json(health as never)),
      http.post(`${A}/exec`, async () => {
        if (stats.inFlight >= capacity) {
          stats.refused++;
          return HttpResponse.json(
            { error: "full", code: "capacity_exceeded" },
            { status: 429, headers: { "retry-after": "0" } },
          );
        }
        stats.inFlight++;
        stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
        await new Promise((resolve) => setTimeout(resolve, 15));
        stats.inFlight--;
        stats.ran++;
        return HttpResponse.json(fullResult);
      }),
    );
    return { f, stats };
  }

  it("sizes itself from /health: a bridge taking 4 sees few refusals from a ceiling of 64", async () => {
    const admission = { maxConcurrent: 2, maxQueued: 2, running: 0, queued: 0 };
    const { f, stats } = boundedBridge(4, { ok: true, protocol: 2, admission });
    const c = createClient({ url: A, fetch: f, retry: quickRetry });
    const settled = await c.runMany(
      Array.from({ length: 60 }, (_, i) => `echo ${i}`),
      { concurrency: 64 },
    );
    expect(settled.filter((s) => s.status === "rejected")).toEqual([]);
    expect(stats.ran).toBe(60);
    // 64 at once would have been refused 56 times in the first round alone.
    expect(stats.refused).toBeLessThan(10);
  });

  it("backs off when a bridge that reports nothing refuses, and every task still runs once", async () => {
    const { f, stats } = boundedBridge(3, { ok: true });
    const refusals: RetryInfo[] = [];
    const c = createClient({
      url: A,
      fetch: f,
      retry: { ...quickRetry, onRetry: (info) => refusals.push(info) },
    });
    const settled = await c.runMany(
      Array.from({ length: 60 }, (_, i) => `echo ${i}`),
      { concurrency: 32 },
    );
    expect(settled.filter((s) => s.status === "rejected")).toEqual([]);
    expect(stats.ran).toBe(60);
    expect(stats.maxInFlight).toBeLessThanOrEqual(3);
    expect(stats.refused).toBe(refusals.length);
    expect(stats.refused).toBeLessThan(20);
  });

  it("grows to the ceiling against a bridge that never refuses", async () => {
    const { f, stats } = boundedBridge(1_000, { ok: true });
    const c = createClient({ url: A, fetch: f });
    await c.runMany(
      Array.from({ length: 200 }, (_, i) => `echo ${i}`),
      { concurrency: 40 },
    );
    expect(stats.maxInFlight).toBe(40);
    expect(stats.refused).toBe(0);
  });
});
