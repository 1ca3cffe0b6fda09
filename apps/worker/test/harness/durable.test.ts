/**
 * Durable calls on the built Worker (DURABLE_CALLS on) against the fake engine: the client's
 * `run()` whose connection is cut after its request was sent gets the call's one result by
 * re-attaching (the Worker's /health reports `durable`), and the command ran once.
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

/** A fetch that cuts the first `POST /exec` it carries `afterMs` after sending it. */
function cuttingFetch(afterMs: number): { fetch: typeof fetch; cuts: () => number } {
  let cuts = 0;
  const cutting: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    if (request.method !== "POST" || !request.url.endsWith("/exec") || cuts > 0) {
      return fetch(request);
    }
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
});
