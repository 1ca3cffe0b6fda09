import { connect, type Socket } from "node:net";
import { Worker } from "node:worker_threads";
import { createClient } from "@remote-task/client";
import {
  type Admission,
  errorBodySchema,
  execResultSchema,
  healthResponseSchema,
} from "@remote-task/protocol";
import { Agent, request } from "undici";
import { describe, expect, it } from "vitest";
import { startTestBridge } from "./support/bridge.js";
import { type BridgeProcess, startBridgeProcess } from "./support/bridge-process.js";

const MiB = 1024 * 1024;
/**
 * RSS growth allowed for 40 stalled streams of NUL-heavy output (4 MB per stream, 1 MiB cap). What
 * they must cost: each call's retained tails (2 x 1 MiB, for its result) and its bounded event
 * buffer (256 KiB plus one event). Measured 174-207 MiB (about 4.5-5 MiB per call: the result's
 * tails, the buffers, and the allocator keeping the high-water mark of tails decoded into the
 * result); before backpressure the same load grew the bridge by 1,027 MiB (the forwarded output
 * and the exit event queued whole, escaped 6 bytes per NUL).
 */
const SLOW_READERS_RSS_BYTES = 320 * MiB;
/** Concurrent calls of the overload test (the figure). */
const CALLS = 1000;

function headers(bridge: BridgeProcess, extra: Record<string, string> = {}) {
  return { authorization: `Bearer ${bridge.token}`, ...extra };
}

/**
 * Asks `/health` every `everyMs` until `stop()`, from a thread of its own (so the load this
 * process generates does not delay the probe's own clock); latencies and reported loads.
 */
function probeHealth(bridge: BridgeProcess, everyMs: number) {
  const worker = new Worker(
    `
    const { parentPort, workerData } = require("node:worker_threads");
    let running = true;
    parentPort.on("message", () => { running = false; });
    (async () => {
      const results = [];
      while (running) {
        const started = performance.now();
        const answer = await fetch(workerData.url, { headers: workerData.headers });
        const body = await answer.json();
        results.push({ ms: performance.now() - started, status: answer.status, admission: body.admission });
        await new Promise((resolve) => setTimeout(resolve, workerData.everyMs));
      }
      parentPort.postMessage(results);
    })();
    `,
    { eval: true, workerData: { url: `${bridge.url}/health`, headers: headers(bridge), everyMs } },
  );
  return {
    async stop(): Promise<{ latencies: number[]; loads: Admission[] }> {
      const results = new Promise<{ ms: number; status: number; admission: unknown }[]>(
        (resolve, reject) => {
          worker.once("message", resolve);
          worker.once("error", reject);
        },
      );
      worker.postMessage("stop");
      const probes = await results;
      await worker.terminate();
      for (const probe of probes) expect(probe.status).toBe(200);
      return {
        latencies: probes.map((probe) => probe.ms),
        loads: probes.map((probe) =>
          healthResponseSchema.shape.admission.unwrap().parse(probe.admission),
        ),
      };
    },
  };
}

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))] ??
  Number.NaN;

describe("overload: more calls at once than the bridge admits", () => {
  it(`${CALLS} concurrent calls: each answered 200 (run) or 429 (not run, Retry-After); /health answers throughout`, async () => {
    const bridge = await startBridgeProcess("none");
    const agent = new Agent({ connections: CALLS, keepAliveTimeout: 1000 });
    try {
      const admission = healthResponseSchema.parse(
        await (await request(`${bridge.url}/health`, { headers: headers(bridge) })).body.json(),
      ).admission;
      expect(admission).toBeDefined();
      const probe = probeHealth(bridge, 50);
      const started = performance.now();
      const answers = await Promise.all(
        Array.from({ length: CALLS }, async (_, index) => {
          const sent = performance.now();
          const answer = await request(`${bridge.url}/exec`, {
            method: "POST",
            dispatcher: agent,
            headers: headers(bridge, { "content-type": "application/json" }),
            body: JSON.stringify({
              sandboxId: `overload-${process.pid}-${index}`,
              command: `sleep 0.2; echo ran-${index}`,
            }),
          });
          const text = await answer.body.text();
          return {
            index,
            status: answer.statusCode,
            retryAfter: answer.headers["retry-after"],
            text,
            ms: performance.now() - sent,
          };
        }),
      );
      const elapsedMs = performance.now() - started;
      const health = await probe.stop();

      const ran = answers.filter((answer) => answer.status === 200);
      const refused = answers.filter((answer) => answer.status === 429);
      console.info(
        `[overload] ${CALLS} calls in ${(elapsedMs / 1000).toFixed(1)} s with admission ${JSON.stringify(admission)}: ` +
          `${ran.length} ran (p50 ${percentile(
            ran.map((a) => a.ms),
            0.5,
          ).toFixed(0)} ms, max ${Math.max(...ran.map((a) => a.ms)).toFixed(0)} ms), ` +
          `${refused.length} refused with 429 (p50 ${percentile(
            refused.map((a) => a.ms),
            0.5,
          ).toFixed(0)} ms); ` +
          `/health ${health.latencies.length} probes, p50 ${percentile(health.latencies, 0.5).toFixed(1)} ms, ` +
          `max ${Math.max(...health.latencies).toFixed(1)} ms; most running ${Math.max(...health.loads.map((l) => l.running))}, ` +
          `most queued ${Math.max(...health.loads.map((l) => l.queued))}`,
      );

      // Every answer is a result of a command that ran, or a refusal of one that did not.
      expect(ran.length + refused.length).toBe(CALLS);
      expect(ran.length).toBeGreaterThanOrEqual(admission?.maxConcurrent ?? 1);
      expect(refused.length).toBeGreaterThan(0);
      for (const answer of ran) {
        const result = execResultSchema.parse(JSON.parse(answer.text));
        expect(result).toMatchObject({ code: 0, stdout: `ran-${answer.index}\n` });
      }
      for (const answer of refused) {
        const body = errorBodySchema.parse(JSON.parse(answer.text));
        expect(body.code).toBe("capacity_exceeded");
        // The delay comes from the queue: the same in the header, the body and the text.
        const seconds = body.retryAfterSeconds ?? 0;
        expect(seconds).toBeGreaterThanOrEqual(1);
        expect(seconds).toBeLessThanOrEqual(60);
        expect(answer.retryAfter).toBe(String(seconds));
        expect(body.error).toContain(`Retry in ${seconds} s`);
      }
      // /health answered while the bridge was full (its answer reports the load at that moment:
      // all slots running and calls waiting), and the load it reported never passed the
      // admission. Its latency is printed above; a busy machine makes it no bound.
      expect(health.latencies.length).toBeGreaterThan(3);
      expect(
        health.loads.some((load) => load.running === admission?.maxConcurrent && load.queued > 0),
      ).toBe(true);
      for (const load of health.loads) {
        expect(load.running).toBeLessThanOrEqual(admission?.maxConcurrent ?? 0);
        expect(load.queued).toBeLessThanOrEqual(admission?.maxQueued ?? 0);
      }
      // The refused calls never started a sandbox: exactly the ones that ran did.
      const after = await bridge.settled();
      expect(after.stats.started).toBe(ran.length);
      expect(after.stats.live).toBe(0);
      expect(await bridge.leftoverDirs()).toEqual([]);
      const lines = bridge.logLines.map((line) => JSON.parse(line) as { event: string });
      expect(lines.filter((line) => line.event === "exec")).toHaveLength(ran.length);
      expect(lines.filter((line) => line.event !== "exec")).toEqual([]);
    } finally {
      await agent.close();
      await bridge.close();
    }
  }, 120_000);
});

describe("a burst within the queue", () => {
  it("256 callers at once, each `sleep 0.1`, with the default admission: all run, none refused", async () => {
    const host = await startTestBridge({ token: "burst-test-token-0123456789" });
    const agent = new Agent({ connections: 256 });
    try {
      const answers = await Promise.all(
        Array.from({ length: 256 }, async (_, index) => {
          const answer = await request(`${host.bridge.url}/exec`, {
            method: "POST",
            dispatcher: agent,
            headers: {
              authorization: `Bearer ${host.bridge.token}`,
              "content-type": "application/json",
            },
            body: JSON.stringify({
              sandboxId: `burst-${process.pid}-${index}`,
              command: `sleep 0.1; echo ran-${index}`,
            }),
          });
          return { index, status: answer.statusCode, text: await answer.body.text() };
        }),
      );
      expect(answers.filter((answer) => answer.status !== 200)).toEqual([]);
      for (const answer of answers) {
        expect(execResultSchema.parse(JSON.parse(answer.text)).stdout).toBe(
          `ran-${answer.index}\n`,
        );
      }
      const queued = host.logs.execEntries().filter((entry) => entry.queuedMs !== undefined);
      expect(queued.length).toBeGreaterThan(200);
      await host.settled();
    } finally {
      await agent.close();
      await host.close();
    }
  }, 120_000);
});

describe("the client against an overloaded bridge", () => {
  it("retries the 429s it gets and every task runs exactly once", async () => {
    const host = await startTestBridge({ admission: { maxConcurrent: 2, maxQueued: 2 } });
    const retried: string[] = [];
    const client = createClient({
      url: host.bridge.url,
      token: host.bridge.token,
      retry: {
        maxAttempts: 10,
        maxTotalMs: 60_000,
        onRetry: (info) => retried.push(`${info.error.status} ${info.error.code}`),
      },
    });
    try {
      const tasks = Array.from({ length: 12 }, (_, i) => `sleep 0.3; echo task-${i}`);
      const settled = await client.runMany(tasks, { concurrency: 12 });
      expect(settled.map((task) => task.status)).toEqual(Array(12).fill("fulfilled"));
      settled.forEach((task, i) => {
        if (task.status === "fulfilled") expect(task.value.stdout).toBe(`task-${i}\n`);
      });
      // Some calls were refused and sent again, yet every command ran exactly once.
      expect(retried.length).toBeGreaterThan(0);
      expect(new Set(retried)).toEqual(new Set(["429 capacity_exceeded"]));
      await host.settled();
      expect(host.backend.stats()).toMatchObject({ started: 12, destroyed: 12, live: 0 });
      expect(host.logs.execEntries()).toHaveLength(12);
    } finally {
      await client.close();
      await host.close();
    }
  }, 60_000);
});

/** Sends a streamed exec on a raw socket that never reads what comes back. */
function stalledReader(bridge: BridgeProcess, sandboxId: string, command: string): Socket {
  const { hostname, port } = new URL(bridge.url);
  const body = JSON.stringify({ sandboxId, command });
  const socket = connect(Number(port), hostname, () => {
    socket.write(
      `POST /exec HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${bridge.token}\r\n` +
        `Content-Type: application/json\r\nAccept: text/event-stream\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
  socket.pause();
  socket.on("error", () => {});
  return socket;
}

describe("slow readers: streamed calls whose readers never read", () => {
  it("40 of them cost the bridge a bounded amount of memory, and each call still ends", async () => {
    const bridge = await startBridgeProcess("none");
    const sockets: Socket[] = [];
    try {
      const baseline = await bridge.stats();
      // 4 MB of NUL bytes on each stream: the most JSON escaping there is (6 bytes per byte).
      const command = "head -c 4000000 /dev/zero; head -c 4000000 /dev/zero >&2; echo done";
      for (let i = 0; i < 40; i++) {
        sockets.push(stalledReader(bridge, `slow-${process.pid}-${i}`, command));
      }
      // Every call runs to its end (its log line) although nobody reads.
      const deadline = Date.now() + 60_000;
      while (bridge.logLines.length < 40 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(bridge.logLines).toHaveLength(40);
      // Their sandboxes are gone too: a reader that does not read holds nothing of the sandbox.
      const loaded = await bridge.settled();
      const growth = loaded.rss - baseline.rss;
      console.info(
        `[slow readers] 40 stalled streams: RSS ${(baseline.rss / MiB).toFixed(1)} -> ${(loaded.rss / MiB).toFixed(1)} MiB ` +
          `(+${(growth / MiB).toFixed(1)} MiB), heap used ${(baseline.heapUsed / MiB).toFixed(1)} -> ${(loaded.heapUsed / MiB).toFixed(1)} MiB, ` +
          `external ${(baseline.external / MiB).toFixed(1)} -> ${(loaded.external / MiB).toFixed(1)} MiB`,
      );
      expect(loaded.stats.live).toBe(0);
      expect(growth).toBeLessThan(SLOW_READERS_RSS_BYTES);
      // Once the readers are gone, what they held is released.
      for (const socket of sockets) socket.destroy();
      const deadlineFreed = Date.now() + 10_000;
      let after = await bridge.stats();
      while (after.external > baseline.external + 16 * MiB && Date.now() < deadlineFreed) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        after = await bridge.stats();
      }
      expect(after.external).toBeLessThan(baseline.external + 16 * MiB);
    } finally {
      for (const socket of sockets) socket.destroy();
      await bridge.close();
    }
  }, 120_000);
});
