import { errorBodySchema, healthResponseSchema } from "@remote-task/protocol";
import { afterEach, describe, expect, it } from "vitest";
import {
  CONCURRENT_CALLS_PER_CORE,
  createBridge,
  defaultAdmission,
  type ExecLogEntry,
  QUEUED_CALLS_PER_RUNNING,
  queuedCallBytes,
} from "../src/index.js";

import { createFakeBackend } from "../src/testing/index.js";
import { eventually, freshId, request, setupBridge, shutdownBridges } from "./helpers.js";

afterEach(shutdownBridges);

/** A bridge with 2 slots and 1 place in the queue over commands that run until ended. */
function full() {
  return setupBridge(
    { admission: { maxConcurrent: 2, maxQueued: 1 } },
    { script: () => ({ hang: true }) },
  );
}

async function health(bridge: ReturnType<typeof full>["bridge"]) {
  return healthResponseSchema.parse(await (await bridge(request("/health"))).json());
}

/**
 * Asserts the overload refusal: 429 `capacity_exceeded`, the command unrun, and the same delay in
 * `Retry-After`, `retryAfterSeconds` and the text (`retryAfter` when given); returns the delay.
 */
async function expectOverload(response: Response, retryAfter?: number): Promise<number> {
  expect(response.status).toBe(429);
  expect(response.headers.get("content-type")).toMatch(/^application\/json/);
  const body = errorBodySchema.parse(await response.json());
  expect(body.code).toBe("capacity_exceeded");
  expect(body.error).toContain("did not run");
  const seconds = body.retryAfterSeconds ?? Number.NaN;
  expect(response.headers.get("retry-after")).toBe(String(seconds));
  expect(body.error).toContain(`Retry in ${seconds} s`);
  if (retryAfter !== undefined) expect(seconds).toBe(retryAfter);
  return seconds;
}

function execLines(logger: ReturnType<typeof full>["logger"]): ExecLogEntry[] {
  return logger.entries.filter((entry): entry is ExecLogEntry => entry.event === "exec");
}

describe("admission: slots and the queue", () => {
  it("runs up to maxConcurrent, queues up to maxQueued, and refuses the rest with 429 capacity_exceeded and Retry-After, unrun", async () => {
    const { bridge, backend, exec } = full();
    const running = [exec({ command: "a" }), exec({ command: "b" })];
    await eventually(() => backend.starts.length === 2, "two starts");
    const waiting = exec({ command: "c" });
    await eventually(async () => (await health(bridge)).admission?.queued === 1, "one queued");
    expect(backend.starts).toHaveLength(2);

    // No call has ended yet: each is taken to hold its slot 1 s; 1 waiting on 2 slots is 1 s.
    await expectOverload(await exec({ command: "d" }), 1);
    await expectOverload(await exec({ command: "e" }, { stream: true }), 1);
    expect(backend.starts.map((spec) => spec.command)).toEqual(["a", "b"]);

    expect((await health(bridge)).admission).toEqual({
      maxConcurrent: 2,
      maxQueued: 1,
      running: 2,
      queued: 1,
    });
    await bridge(request("/cancel", { body: { sandboxId: backend.starts[0]?.sandboxId } }));
    await eventually(() => backend.starts.length === 3, "the waiting call starts");
    expect(backend.starts[2]?.command).toBe("c");
    expect((await health(bridge)).admission).toMatchObject({ running: 2, queued: 0 });
    await bridge.shutdown();
    await Promise.all([...running, waiting]);
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("when full, refuses before reading the request: a body that never ends still gets its 429 at once", async () => {
    const { bridge, backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 0 } },
      { script: () => ({ hang: true }) },
    );
    void exec({ command: "a" });
    await eventually(() => backend.starts.length === 1, "first start");
    let pulls = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulls++;
        controller.enqueue(new TextEncoder().encode(" "));
        return new Promise(() => {});
      },
    });
    await expectOverload(await bridge(request("/exec", { raw: endless, method: "POST" })), 1);
    expect(pulls).toBeLessThanOrEqual(1);
    await bridge.shutdown();
  });

  it("logs how long a call waited for its slot", async () => {
    const { bridge, backend, exec, logger } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 1 } },
      { script: (spec) => (spec.command === "slow" ? { exitDelayMs: 150 } : {}) },
    );
    const first = exec({ command: "slow" });
    await eventually(() => backend.starts.length === 1, "first start");
    const second = await exec({ command: "quick" });
    expect(second.status).toBe(200);
    expect((await first).status).toBe(200);
    const [slow, quick] = execLines(logger);
    expect(slow?.queuedMs).toBeUndefined();
    expect(slow?.started).toBeUndefined();
    expect(quick?.queuedMs).toBeGreaterThanOrEqual(100);
    expect(quick?.durationMs).toBeGreaterThanOrEqual(quick?.queuedMs ?? 0);
    expect(quick?.started).toBeUndefined();
    expect(quick).toMatchObject({ outcome: "exited", code: 0 });
    expect(bridge.activeCalls).toBe(0);
  });

  it("never starts a queued call whose client left, and frees its place in the queue", async () => {
    const { bridge, backend, exec, logger } = full();
    void exec({ command: "a" });
    void exec({ command: "b" });
    await eventually(() => backend.starts.length === 2, "two starts");
    const controller = new AbortController();
    const left = exec({ command: "left" }, { signal: controller.signal });
    await eventually(async () => (await health(bridge)).admission?.queued === 1, "queued");
    controller.abort();
    expect(await (await left).json()).toMatchObject({ outcome: "cancelled", code: 130 });
    expect((await health(bridge)).admission).toMatchObject({ running: 2, queued: 0 });
    const line = execLines(logger).find((entry) => entry.endedBy === "disconnect");
    expect(line).toMatchObject({ outcome: "cancelled", started: false });
    expect(line?.queuedMs).toBeGreaterThanOrEqual(0);

    // Its place is free again, and once a slot is, the next waiting call starts, not the one that left.
    const next = exec({ command: "next" });
    await eventually(async () => (await health(bridge)).admission?.queued === 1, "next queued");
    await bridge(request("/cancel", { body: { sandboxId: backend.starts[0]?.sandboxId } }));
    await eventually(() => backend.starts.length === 3, "next starts");
    expect(backend.starts.map((spec) => spec.command)).toEqual(["a", "b", "next"]);
    expect(backend.destroys).not.toContain(line?.sandboxId);
    await bridge.shutdown();
    await next;
  });
});

describe("admission: deadlines, fairness and cancellation", () => {
  it("counts the time in the queue against the call's timeout: a call that waits past it is refused as unrun, never a timeout", async () => {
    const { bridge, backend, exec, logger } = full();
    void exec({ command: "a" });
    void exec({ command: "b" });
    await eventually(() => backend.starts.length === 2, "two starts");
    for (const stream of [true, false]) {
      const answer = await exec({ command: "late", timeoutSeconds: 0.2 }, { stream });
      // An HTTP error, streamed or not: a client reads it as refused before anything ran.
      expect(answer.status).toBe(503);
      expect(answer.headers.get("content-type")).toMatch(/^application\/json/);
      const body = errorBodySchema.parse(await answer.json());
      expect(body.code).toBe("capacity_exceeded");
      expect(body.error).toMatch(/waited 0\.\d s for a slot and reached its deadline/);
      expect(body.error).toContain("did not run");
      expect(answer.headers.get("retry-after")).toBe(String(body.retryAfterSeconds));
    }
    const lines = execLines(logger).filter((entry) => entry.endedBy === "timeout");
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).toMatchObject({
        started: false,
        outcome: "error",
        errorCode: "capacity_exceeded",
      });
      expect(line.queuedMs).toBeGreaterThanOrEqual(190);
    }
    expect(backend.starts).toHaveLength(2);
    expect((await health(bridge)).admission).toMatchObject({ running: 2, queued: 0 });
  });

  it("refuses at once a call that would wait for a slot past its deadline", async () => {
    const { backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 8 } },
      {
        script: (spec) => (spec.command === "hang" ? { hang: true } : { exitDelayMs: 300 }),
      },
    );
    // One call of about 300 ms: the bridge now takes calls to hold their slot about that long.
    expect((await exec({ command: "short" })).status).toBe(200);
    void exec({ command: "hang" });
    await eventually(() => backend.starts.length === 2, "the hanging call runs");
    const queued = exec({ command: "short", timeoutSeconds: 5 });
    const refused = await exec({ command: "short", timeoutSeconds: 0.1 });
    await expectOverload(refused);
    const text = errorBodySchema.parse(
      await (await exec({ command: "short", timeoutSeconds: 0.1 })).json(),
    ).error;
    expect(text).toMatch(/would wait about \d+ s for a slot, longer than its timeout of 0\.1 s/);
    expect(backend.starts.map((spec) => spec.command)).toEqual(["short", "hang"]);
    void queued;
  });

  it("gives a free slot to the client with the fewest calls running, and bounds each client's share of the queue", async () => {
    const { bridge, backend } = setupBridge(
      { admission: { maxConcurrent: 2, maxQueued: 8, maxQueuedPerClient: 3 } },
      { script: () => ({ hang: true }) },
    );
    const from = (client: string, command: string) =>
      bridge(request("/exec", { body: { sandboxId: freshId(), command } }), { client });
    const answers = [from("a", "a1"), from("a", "a2")];
    await eventually(() => backend.starts.length === 2, "a's two calls run");
    answers.push(from("a", "a3"), from("a", "a4"), from("a", "a5"));
    await eventually(async () => (await health(bridge)).admission?.queued === 3, "a's three wait");
    // a has its share of the queue: its next call is refused; b still gets a place.
    const refused = await from("a", "a6");
    await expectOverload(refused);
    answers.push(from("b", "b1"));
    await eventually(async () => (await health(bridge)).admission?.queued === 4, "b waits");
    // A slot frees: b's call goes first though a's waited longer.
    await bridge(request("/cancel", { body: { sandboxId: backend.starts[0]?.sandboxId } }));
    await eventually(() => backend.starts.length === 3, "a slot is given");
    expect(backend.starts[2]?.command).toBe("b1");
    await bridge(request("/cancel", { body: { sandboxId: backend.starts[1]?.sandboxId } }));
    await eventually(() => backend.starts.length === 4, "the next slot is given");
    expect(backend.starts[3]?.command).toBe("a3");
    await bridge.shutdown();
    await Promise.all(answers);
  });

  it("cancels a queued call by its id and ends queued calls at shutdown, none of them started", async () => {
    const { bridge, backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 2 } },
      { script: () => ({ hang: true }) },
    );
    const first = exec({ command: "a" });
    await eventually(() => backend.starts.length === 1, "first start");
    const cancelledId = freshId();
    const cancelled = exec({ command: "b", sandboxId: cancelledId });
    const atShutdown = exec({ command: "c" });
    await eventually(async () => (await health(bridge)).admission?.queued === 2, "two queued");
    const cancel = await bridge(request("/cancel", { body: { sandboxId: cancelledId } }));
    expect(await cancel.json()).toMatchObject({ cancelled: true });
    expect(await (await cancelled).json()).toMatchObject({ outcome: "cancelled" });
    await bridge.shutdown();
    // Never started: refused as unrun, not answered as a cancelled command.
    const refused = await atShutdown;
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ code: "capacity_exceeded" });
    expect(await (await first).json()).toMatchObject({ outcome: "cancelled" });
    expect(backend.starts.map((spec) => spec.command)).toEqual(["a"]);
    expect(backend.destroys).toEqual([backend.starts[0]?.sandboxId]);
  });

  it("with no queue refuses as soon as every slot is taken; a slot is held until the sandbox is destroyed", async () => {
    const handed: Promise<unknown>[] = [];
    const { backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 0 }, waitUntil: (p) => handed.push(p) },
      { destroyLatencyMs: 200 },
    );
    expect((await exec({ command: "true" })).status).toBe(200);
    // Answered, but its sandbox is still being destroyed: the slot is not free yet.
    expect(backend.liveSandboxes()).toBe(1);
    await expectOverload(await exec({ command: "true" }));
    await Promise.all(handed);
    expect((await exec({ command: "true" })).status).toBe(200);
  });
});

describe("admission: defaults and bounds", () => {
  it("defaults to 4 calls per core running, 64 waiting per running call, and 64 MiB waiting", () => {
    expect(CONCURRENT_CALLS_PER_CORE).toBe(4);
    expect(QUEUED_CALLS_PER_RUNNING).toBe(64);
    const maxQueuedBytes = 64 * 1024 * 1024;
    expect(defaultAdmission(2)).toEqual({
      maxConcurrent: 8,
      maxQueued: 512,
      maxQueuedBytes,
      maxQueuedPerClient: 256,
    });
    expect(defaultAdmission(1)).toEqual({
      maxConcurrent: 4,
      maxQueued: 256,
      maxQueuedBytes,
      maxQueuedPerClient: 128,
    });
    expect(defaultAdmission()).toEqual(defaultAdmission(navigator.hardwareConcurrency));
  });

  it("queues a burst of 256 callers with the defaults of a 2-core machine: none refused, never more than 8 running", async () => {
    const { bridge, exec, backend } = setupBridge(
      { admission: defaultAdmission(2) },
      { script: () => ({ chunks: [{ data: "ok\n", delayMs: 20 }] }) },
    );
    let mostRunning = 0;
    let mostQueued = 0;
    const watching = setInterval(() => {
      void health(bridge).then(({ admission }) => {
        mostRunning = Math.max(mostRunning, admission?.running ?? 0);
        mostQueued = Math.max(mostQueued, admission?.queued ?? 0);
      });
    }, 5);
    const answers = await Promise.all(Array.from({ length: 256 }, () => exec({ command: "x" })));
    clearInterval(watching);
    expect(answers.map((answer) => answer.status)).toEqual(Array(256).fill(200));
    expect(backend.starts).toHaveLength(256);
    expect(mostRunning).toBeLessThanOrEqual(8);
    expect(mostQueued).toBeGreaterThan(100);
    expect(bridge.activeCalls).toBe(0);
  });

  it("bounds the queue by the bytes its calls hold: a call that would pass them is refused, unrun", async () => {
    const stdin = "s".repeat(100_000);
    const held = queuedCallBytes({
      command: "cat",
      env: { NAME: "value" },
      stdin: new Uint8Array(100_000),
    });
    expect(held).toBe(16 * 1024 + 3 + 4 + 5 + 100_000);
    const { bridge, backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 100, maxQueuedBytes: 3 * held + 20_000 } },
      { script: () => ({ hang: true }) },
    );
    void exec({ command: "first" });
    await eventually(() => backend.starts.length === 1, "first start");
    const waiting = [1, 2, 3].map(() => exec({ command: "cat", env: { NAME: "value" }, stdin }));
    await eventually(async () => (await health(bridge)).admission?.queued === 3, "three queued");
    // A fourth as large would pass the bytes (the count has room); a small one fits, and waits.
    const refused = await exec({ command: "cat", env: { NAME: "value" }, stdin });
    await expectOverload(refused);
    const small = exec({ command: "true" });
    await eventually(async () => (await health(bridge)).admission?.queued === 4, "small queued");
    expect(backend.starts).toHaveLength(1);
    await bridge.shutdown();
    await Promise.all([...waiting, small]);
  });

  it("computes Retry-After from the queue: before any call ended, 1 s a call per slot, within 1-60 s", async () => {
    /** A bridge of 1 slot, held, with `count` calls waiting; answers the next call's refusal. */
    const refusalWith = async (count: number) => {
      const { bridge, backend, exec } = setupBridge(
        { admission: { maxConcurrent: 1, maxQueued: count } },
        { script: () => ({ hang: true }) },
      );
      void exec({ command: "hang" });
      await eventually(() => backend.starts.length === 1, "first start");
      const waiting = Array.from({ length: count }, () => exec({ command: "hang" }));
      await eventually(async () => (await health(bridge)).admission?.queued === count, "queued");
      const refused = await exec({ command: "x" });
      await bridge.shutdown();
      await Promise.all(waiting);
      return refused;
    };
    await expectOverload(await refusalWith(10), 10);
    // 200 waiting would be 200 s: clamped to 60.
    await expectOverload(await refusalWith(200), 60);
  });

  it("learns how long calls hold their slot: after calls of about 300 ms, 8 waiting on 1 slot is about 3 s", async () => {
    const { bridge, backend, exec } = setupBridge(
      { admission: { maxConcurrent: 1, maxQueued: 8 } },
      { script: (spec) => (spec.command === "timed" ? { exitDelayMs: 300 } : { hang: true }) },
    );
    expect((await exec({ command: "timed" })).status).toBe(200);
    void exec({ command: "hang" });
    await eventually(() => backend.starts.length === 2, "second start");
    const waiting = Array.from({ length: 8 }, () => exec({ command: "hang" }));
    await eventually(async () => (await health(bridge)).admission?.queued === 8, "eight queued");
    // 8 x 0.3 s = 2.4 s, rounded up; a slower machine holds the slot longer. The assumption
    // (1 s a call) would have said 8, the least a measured estimate can say is 3.
    const seconds = await expectOverload(await exec({ command: "x" }));
    expect(seconds).toBeGreaterThanOrEqual(3);
    expect(seconds).not.toBe(8);
    await bridge.shutdown();
    await Promise.all(waiting);
  });

  it("lets a 16-way fan-out of short commands through with the defaults of a 2-core machine", async () => {
    const { exec, backend } = setupBridge(
      { admission: defaultAdmission(2) },
      { script: () => ({ chunks: [{ data: "ok\n", delayMs: 50 }] }) },
    );
    const answers = await Promise.all(Array.from({ length: 16 }, () => exec({ command: "x" })));
    expect(answers.map((answer) => answer.status)).toEqual(Array(16).fill(200));
    expect(backend.starts).toHaveLength(16);
  });

  it("refuses admission settings that are not whole numbers in range", () => {
    const backend = createFakeBackend();
    for (const admission of [
      { maxConcurrent: 0 },
      { maxConcurrent: 1.5 },
      { maxConcurrent: Number.POSITIVE_INFINITY },
      { maxQueued: -1 },
      { maxQueued: Number.NaN },
      { maxQueuedBytes: -1 },
      { maxQueuedBytes: 0.5 },
    ]) {
      expect(() => createBridge({ backend, admission }), JSON.stringify(admission)).toThrow(
        TypeError,
      );
    }
    // A given maxConcurrent sizes the default queue.
    const { bridge } = setupBridge({ admission: { maxConcurrent: 3 } });
    return health(bridge).then((answer) =>
      expect(answer.admission).toMatchObject({ maxConcurrent: 3, maxQueued: 192 }),
    );
  });
});
