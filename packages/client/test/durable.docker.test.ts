// Durable calls on the docker backend (a real Podman engine, started by
// scripts/docker-engine.mjs as the bridge's docker tests start it): calls cut at random moments
// by a proxy each return their own output, each ran once, no container is left. Skipped
// without an engine.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { BridgeLogEntry } from "@remote-task/bridge";
import type { DockerBackend } from "@remote-task/bridge/docker";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "../src/index.js";
import { eventually } from "./helpers/assertions.js";
import { type CutProxy, startCutProxy } from "./helpers/cut-proxy.js";

const CALLS = 100;
const script = fileURLToPath(new URL("../../../scripts/docker-engine.mjs", import.meta.url));

interface Engine {
  host: string;
  image: string;
  ulimits: Record<string, number>;
}

function engine(): Engine | undefined {
  try {
    const out = execFileSync(process.execPath, [script, "ensure"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 120_000,
    });
    return JSON.parse(out.trim().split("\n").at(-1) ?? "") as Engine;
  } catch {
    return undefined;
  }
}

const found = engine();

if (found === undefined)
  it.skip("durable calls on the docker backend (no container engine)", () => {});
else
  describe("durable calls on the docker backend, through a proxy that cuts every connection", () => {
    let bridge: EmbeddedBridge<DockerBackend>;
    let proxy: CutProxy;
    const logs: BridgeLogEntry[] = [];

    beforeAll(async () => {
      bridge = (await startEmbeddedBridge({
        docker: { image: found.image, engine: found.host, ulimits: found.ulimits },
        admission: { maxConcurrent: 8 },
        logger: (entry) => logs.push(entry),
      })) as EmbeddedBridge<DockerBackend>;
      proxy = await startCutProxy(Number(new URL(bridge.url).port), 1_500);
    }, 180_000);

    afterAll(async () => {
      await proxy?.close();
      await bridge?.close();
    });

    it("returns each call's own output once; each command ran once; no container left", async () => {
      const client = createClient({ url: proxy.url, token: bridge.token, timeoutSeconds: 120 });
      try {
        const tasks = Array.from({ length: CALLS }, (_, i) => `sleep 1; echo done-${i}`);
        const settled = await client.runMany(tasks, { concurrency: 16 });
        // As in durable.bridge.test.ts: every call ends with its own output, none ran twice.
        const failures = settled.flatMap((task) => (task.status === "rejected" ? [task] : []));
        expect(failures.map((task) => String(task.reason))).toEqual([]);
        for (const task of settled) {
          if (task.status === "fulfilled") expect(task.value.stdout).toBe(`done-${task.index}\n`);
        }
        // One exec log line per call that started, each of its own id: none ran twice.
        const lines = logs.filter((entry) => entry.event === "exec");
        const ids = lines.map((entry) => (entry as { sandboxId: string }).sandboxId);
        expect(new Set(ids).size).toBe(ids.length);
        expect(ids.length).toBe(CALLS);
        expect(proxy.cuts).toBeGreaterThan(CALLS / 2);
        await eventually(() => bridge.backend.liveSandboxes() === 0, 30_000);
      } finally {
        await client.close();
      }
    }, 600_000);
  });
