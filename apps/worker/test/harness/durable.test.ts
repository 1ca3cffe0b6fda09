/**
 * Durable calls on the built Worker (DURABLE_CALLS on) against the fake engine: the client's
 * `run()` whose connection is cut after its request was sent gets the call's one result by
 * re-attaching (the Worker's /health reports `durable`), and the command ran once; one whose
 * request never reached the Worker is sent again (its keeper's `unknown` proves it).
 */
import { createClient } from "@remote-task/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { commandsRun, TOKEN, WorkerHarness } from "./worker.ts";

let harness: WorkerHarness;

beforeAll(async () => {
  harness = await WorkerHarness.start({
    vars: { DURABLE_CALLS: "true", HEDGE_START_AFTER_MS: "off" },
  });
}, 120_000);

afterAll(async () => {
  await harness?.close();
});

/**
 * A fetch that cuts each `POST /exec` it carries the first time it sees its body, `afterMs` after
 * sending it (so each call's connection is cut once, while its command runs).
 */
function cuttingFetch(afterMs: number): { fetch: typeof fetch; cuts: () => number } {
  const seen = new Set<string>();
  let cuts = 0;
  const cutting: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    if (request.method !== "POST" || !request.url.endsWith("/exec")) return fetch(request);
    const body = await request.clone().text();
    if (seen.has(body)) return fetch(request);
    seen.add(body);
    cuts++;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), afterMs);
    try {
      return await fetch(request, { signal: controller.signal });
    } catch (error) {
      // As a dropped connection looks to the client: the request was sent, no answer came.
      if (controller.signal.aborted) throw new TypeError("fetch failed", { cause: error });
      throw error;
    } finally {
      clearTimeout(timer);
    }
  };
  return { fetch: cutting, cuts: () => cuts };
}

describe("durable calls on the built Worker", () => {
  it("reports durable calls in /health", async () => {
    expect((await harness.health()).durable).toMatchObject({ keptSeconds: 600 });
  });

  it("gives run() its result through re-attach when its connection is cut", async () => {
    const cutter = cuttingFetch(1_500);
    const client = createClient({
      url: harness.url.href,
      token: TOKEN,
      timeoutSeconds: 60,
      fetch: cutter.fetch,
    });
    try {
      const sandboxId = `harness-${crypto.randomUUID()}`;
      const result = await client.run("sleep 3; echo done-once", { sandboxId });
      expect(cutter.cuts()).toBe(1);
      expect(result.stdout).toBe("done-once\n");
      expect(result.exitCode).toBe(0);
      const records = await harness.containersOf(sandboxId);
      expect(records.reduce((sum, record) => sum + commandsRun(record), 0)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it("sends a request cut before the Worker had it again: its keeper proves it never got it", async () => {
    let cuts = 0;
    // The first `POST /exec` fails as a reset connection does, without reaching the Worker.
    const cutting: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      if (request.method !== "POST" || !request.url.endsWith("/exec") || cuts > 0) {
        return fetch(request);
      }
      cuts++;
      const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
      throw new TypeError("fetch failed", { cause: reset });
    };
    const client = createClient({ url: harness.url.href, token: TOKEN, fetch: cutting });
    try {
      const sandboxId = `harness-${crypto.randomUUID()}`;
      const result = await client.run("echo sent-again", { sandboxId });
      expect(cuts).toBe(1);
      expect(result.stdout).toBe("sent-again\n");
      const records = await harness.containersOf(sandboxId);
      expect(records.reduce((sum, record) => sum + commandsRun(record), 0)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it("gives each of 20 calls cut mid-run its own output once, each command run once", async () => {
    const cutter = cuttingFetch(1_000);
    const client = createClient({
      url: harness.url.href,
      token: TOKEN,
      timeoutSeconds: 60,
      fetch: cutter.fetch,
    });
    const before = harness.engine.records.length;
    try {
      const tasks = Array.from({ length: 20 }, (_, i) => `sleep 2; echo done-${i}`);
      const settled = await client.runMany(tasks, { concurrency: 20 });
      expect(
        settled.flatMap((task) => (task.status === "rejected" ? [task.reason.message] : [])),
      ).toEqual([]);
      settled.forEach((task, i) => {
        expect(task.status === "fulfilled" && task.value.stdout).toBe(`done-${i}\n`);
      });
      expect(cutter.cuts()).toBe(20);
      // One command per call: no call ran twice, whatever its cut.
      const records = harness.engine.records.slice(before);
      expect(records.reduce((sum, record) => sum + commandsRun(record), 0)).toBe(20);
      await expect.poll(() => harness.engine.live.length, { timeout: 15_000 }).toBe(0);
    } finally {
      await client.close();
    }
  });
});
