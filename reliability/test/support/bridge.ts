import { readdir, rm } from "node:fs/promises";
import type { AdmissionOptions, BridgeLogEntry, BridgeLogger } from "@remote-task/bridge";
import { createLocalBackend, type LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import type { Limits } from "@remote-task/protocol";
import { leftoverDirs, makeTmpRoot } from "./tmp-root.js";

/** Every log entry the bridge wrote, both as objects and as the JSON lines a deployment would see. */
class LogCapture {
  readonly entries: BridgeLogEntry[] = [];
  readonly lines: string[] = [];
  readonly logger: BridgeLogger = (entry) => {
    this.entries.push(entry);
    this.lines.push(JSON.stringify(entry));
  };

  execEntries(): Extract<BridgeLogEntry, { event: "exec" }>[] {
    return this.entries.filter(
      (entry): entry is Extract<BridgeLogEntry, { event: "exec" }> => entry.event === "exec",
    );
  }
}

export interface TestBridge {
  bridge: EmbeddedBridge<LocalBackend>;
  backend: LocalBackend;
  logs: LogCapture;
  tmpRoot: string;
  /** Waits (bounded) until every sandbox the bridge started is destroyed. */
  settled(limitMs?: number): Promise<void>;
  /** Per-call directories not yet removed. */
  leftoverDirs(): Promise<string[]>;
  close(): Promise<void>;
}

export interface TestBridgeOptions {
  isolation?: "none" | "bwrap";
  limits?: Partial<Limits>;
  token?: string;
  heartbeatIntervalMs?: number;
  killGraceMs?: number;
  admission?: AdmissionOptions;
}

/** A real embedded bridge on 127.0.0.1 with the real local backend in a dedicated temp root. */
export async function startTestBridge(options: TestBridgeOptions = {}): Promise<TestBridge> {
  const tmpRoot = await makeTmpRoot("rt-reliability-");
  const backend = createLocalBackend({
    isolation: options.isolation ?? "none",
    tmpRoot,
    killGraceMs: options.killGraceMs ?? 500,
  });
  const logs = new LogCapture();
  const bridge = await startEmbeddedBridge({
    backend,
    logger: logs.logger,
    token: options.token,
    limits: options.limits,
    heartbeatIntervalMs: options.heartbeatIntervalMs,
    admission: options.admission,
    // The faults here are those of a call without durable calls (as against the reference
    // bridge): a dropped connection is the client's ConnectionError and the bridge's disconnect.
    // Durable calls meet the same cuts in the client's durable.bridge.test.ts.
    durable: false,
  }).catch(async (error: unknown) => {
    await backend.close();
    await rm(tmpRoot, { recursive: true, force: true });
    throw error;
  });
  return {
    bridge,
    backend,
    logs,
    tmpRoot,
    async settled(limitMs = 15_000) {
      await waitFor(
        () => backend.liveSandboxes() === 0,
        limitMs,
        () => {
          return `sandboxes still live: ${JSON.stringify(backend.stats())}`;
        },
      );
    },
    leftoverDirs: () => leftoverDirs(tmpRoot),
    async close() {
      await bridge.close();
      await backend.close();
      const left = await readdir(tmpRoot);
      await rm(tmpRoot, { recursive: true, force: true });
      if (left.length > 0) throw new Error(`the closed backend left ${left.join(", ")} behind`);
    },
  };
}

/** Polls `condition` every 20 ms; throws with `describe()` if it is still false after `limitMs`. */
export async function waitFor(
  condition: () => boolean,
  limitMs: number,
  describe: () => string = () => "condition not met",
): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${limitMs} ms: ${describe()}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
