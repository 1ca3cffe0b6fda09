/**
 * A burst far beyond what a small bridge admits, from independent calls of one client (as an
 * agent's parallel tool calls): none fails for capacity, and each command runs exactly once.
 */
import { createClient } from "@remote-task/client";
import { describe, expect, it } from "vitest";
import { startTestBridge } from "./support/bridge.js";

/** Calls at once against a bridge admitting 2 running and 2 waiting. */
const CALLS = 120;

describe("a burst against a small bridge (real local backend)", () => {
  it(`${CALLS} calls at once: 0 failures, each command ran exactly once`, async () => {
    const host = await startTestBridge({ admission: { maxConcurrent: 2, maxQueued: 2 } });
    const client = createClient({ url: host.bridge.url, token: host.bridge.token });
    try {
      const settled = await Promise.allSettled(
        Array.from({ length: CALLS }, (_, i) => client.run(`sleep 0.02; echo task-${i}`)),
      );
      const failures = settled.flatMap((s, i) =>
        s.status === "rejected" ? [`${i}: ${(s.reason as Error).message}`] : [],
      );
      expect(failures).toEqual([]);
      settled.forEach((s, i) => {
        if (s.status === "fulfilled") expect(s.value.stdout).toBe(`task-${i}\n`);
      });
      await host.settled();
      expect(host.backend.stats()).toMatchObject({ started: CALLS, destroyed: CALLS, live: 0 });
      expect(host.logs.execEntries()).toHaveLength(CALLS);
    } finally {
      await client.close();
      await host.close();
    }
  }, 120_000);
});
