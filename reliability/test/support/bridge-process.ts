import { type ChildProcess, fork, type StdioOptions } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Duplex } from "node:stream";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import type { BridgeProcessConfig, BridgeProcessReply } from "../../src/ipc.js";
import { waitFor } from "./bridge.js";
import { leftoverDirs, makeTmpRoot } from "./tmp-root.js";

const ENTRY = join(dirname(fileURLToPath(import.meta.url)), "../../src/bridge-process.ts");

type Stats = Extract<BridgeProcessReply, { type: "stats" }>;

/** A real bridge (local backend) in a child Node process with `--expose-gc`. */
export interface BridgeProcess {
  url: string;
  token: string;
  pid: number;
  isolation: string;
  tmpRoot: string;
  /** Every log line the bridge wrote, as JSON. */
  logLines: string[];
  /** Backend stats and memory after a full GC in the bridge process. */
  stats(): Promise<Stats>;
  /** Waits (bounded) for zero live sandboxes. */
  settled(limitMs?: number): Promise<Stats>;
  leftoverDirs(): Promise<string[]>;
  close(): Promise<void>;
  /** This side of each inherited descriptor (`inheritedDescriptors`), by its number in the bridge. */
  inherited: Map<number, Duplex>;
}

/** Bundles the bridge process from the workspace sources into a fresh temporary directory. */
async function bundle(): Promise<{ dir: string; script: string }> {
  const dir = await mkdtemp(join(tmpdir(), "rt-bridge-bundle-"));
  const script = join(dir, "bridge-process.mjs");
  await build({
    entryPoints: [ENTRY],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    conditions: ["@remote-task/source"],
    outfile: script,
    logLevel: "error",
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
  });
  return { dir, script };
}

export interface BridgeProcessOptions {
  /** Share a temp root with other bridges (it is then not removed by `close`). */
  tmpRoot?: string;
  /**
   * Descriptors the bridge process inherits besides 0-2 and its IPC channel, as a supervisor or a
   * shell may leave open: each a socket whose other end is in `BridgeProcess.inherited`.
   */
  inheritedDescriptors?: number[];
}

export async function startBridgeProcess(
  isolation: "none" | "bwrap",
  options: BridgeProcessOptions = {},
): Promise<BridgeProcess> {
  const { dir: bundleDir, script } = await bundle();
  const ownTmpRoot = options.tmpRoot === undefined;
  const tmpRoot = options.tmpRoot ?? (await makeTmpRoot("rt-soak-"));
  const extra = options.inheritedDescriptors ?? [];
  const stdio: StdioOptions = ["ignore", "inherit", "inherit", "ipc"];
  for (const fd of extra) {
    while (stdio.length < fd) stdio.push("ignore");
    stdio[fd] = "pipe";
  }
  const config: BridgeProcessConfig = {
    isolation,
    tmpRoot,
    token: `soak-token-${process.pid}-${Date.now()}`,
  };
  const child: ChildProcess = fork(script, [], {
    execArgv: ["--expose-gc"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", RT_BRIDGE_CONFIG: JSON.stringify(config) },
    stdio,
  });
  const logLines: string[] = [];
  const statsWaiters: ((stats: Stats) => void)[] = [];
  const ready = new Promise<Extract<BridgeProcessReply, { type: "ready" }>>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`bridge process exited early (${code})`)));
    child.on("message", (reply: BridgeProcessReply) => {
      if (reply.type === "ready") resolve(reply);
      else if (reply.type === "log") logLines.push(reply.line);
      else statsWaiters.shift()?.(reply);
    });
  });
  // The bundle is one file, loaded once the process is ready.
  const info = await ready
    .catch(async (error: unknown) => {
      if (ownTmpRoot) await rm(tmpRoot, { recursive: true, force: true });
      throw error;
    })
    .finally(() => rm(bundleDir, { recursive: true, force: true }));
  const stats = () =>
    new Promise<Stats>((resolve) => {
      statsWaiters.push(resolve);
      child.send({ type: "stats" });
    });
  return {
    url: info.url,
    token: config.token,
    pid: info.pid,
    isolation: info.isolation,
    tmpRoot,
    logLines,
    stats,
    async settled(limitMs = 60_000) {
      let last = await stats();
      const deadline = Date.now() + limitMs;
      while (last.stats.live > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        last = await stats();
      }
      return last;
    },
    leftoverDirs: () => leftoverDirs(tmpRoot),
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.send({ type: "close" });
        await Promise.race([
          exited,
          waitFor(() => false, 20_000).catch(() => child.kill("SIGKILL")),
        ]);
      }
      if (ownTmpRoot) await rm(tmpRoot, { recursive: true, force: true });
    },
    inherited: new Map(extra.map((fd) => [fd, child.stdio[fd] as Duplex])),
  };
}
