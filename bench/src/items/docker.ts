// 12. The docker backend's per-call cost: `client.run("echo hi")` through a bridge on the docker
// backend (Podman's Docker-compatible API, the engine of scripts/docker-engine.mjs) against a bare
// `podman run --rm` of the same image with the same limits, one at a time and 16 at a time.
import { execFile, execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { silentLogger } from "@remote-task/bridge";
import { createDockerBackend, DEFAULT_DOCKER_LIMITS } from "@remote-task/bridge/docker";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createClient } from "@remote-task/client";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, type Summary, summarize } from "../lib/stats.ts";

const run = promisify(execFile);
const COMMAND = "echo hi";
const CONCURRENCY = 16;
const P50_TARGET = 1.3;
const THROUGHPUT_TARGET = 0.6;
const MiB = 1024 * 1024;

interface Engine {
  host: string;
  image: string;
  ulimits: Record<string, number>;
  dir: string;
}

function engine(): Engine {
  const script = fileURLToPath(new URL("../../../scripts/docker-engine.mjs", import.meta.url));
  const out = execFileSync(process.execPath, [script, "ensure"], { encoding: "utf8" });
  return JSON.parse(out.trim().split("\n").at(-1) ?? "") as Engine;
}

/** `podman run --rm` with the flags the backend's create request sets (its default limits). */
function bareArgs(e: Engine, limits: typeof DEFAULT_DOCKER_LIMITS): string[] {
  const tmpfs = (path: string, bytes: number) => [
    "--tmpfs",
    `${path}:rw,exec,nosuid,nodev,size=${bytes},U`,
  ];
  return [
    "--root",
    `${e.dir}/root`,
    "--runroot",
    `${e.dir}/run`,
    "run",
    "--rm",
    "--network",
    "none",
    "--memory",
    String(limits.memoryBytes),
    "--memory-swap",
    String(limits.memoryBytes),
    "--pids-limit",
    String(limits.processes),
    "--ulimit",
    `nofile=${limits.openFiles}:${limits.openFiles}`,
    ...Object.entries(e.ulimits).flatMap(([name, value]) => [
      "--ulimit",
      `${name}=${value}:${value}`,
    ]),
    ...tmpfs("/workspace", limits.workspaceBytes),
    ...tmpfs("/tmp", limits.tmpBytes),
    "--read-only",
    "--cap-drop",
    "all",
    "--security-opt",
    "no-new-privileges",
    "--user",
    "1000:1000",
    "--hostname",
    "sandbox",
    "--log-driver",
    "none",
    "--workdir",
    "/workspace",
    e.image,
    "/bin/sh",
    "-c",
    COMMAND,
  ];
}

async function measure(options: BenchOptions) {
  const e = engine();
  const calls = options.quick ? 10 : 60;
  const warmup = options.quick ? 2 : 5;
  const batch = options.quick ? 32 : 96;
  const backend = createDockerBackend({ image: e.image, engine: e.host, ulimits: e.ulimits });
  await backend.ready;
  const bridge = await startEmbeddedBridge({ backend, logger: silentLogger });
  const client = createClient({ url: bridge.url, token: bridge.token });
  // The same without the pool: every call makes its container.
  const coldBackend = createDockerBackend({
    image: e.image,
    engine: e.host,
    ulimits: e.ulimits,
    pool: 0,
  });
  await coldBackend.ready;
  const coldBridge = await startEmbeddedBridge({ backend: coldBackend, logger: silentLogger });
  const coldClient = createClient({ url: coldBridge.url, token: coldBridge.token });
  const args = bareArgs(e, DEFAULT_DOCKER_LIMITS);
  const env = { ...process.env, CONTAINERS_CONF: `${e.dir}/containers.conf` };
  try {
    const viaBridge = async (c = client) => {
      const started = performance.now();
      const result = await c.run(COMMAND);
      if (result.exitCode !== 0 || result.stdout !== "hi\n") {
        throw new Error(`client.run: exit ${result.exitCode}, ${result.stderr}`);
      }
      return performance.now() - started;
    };
    const bare = async () => {
      const started = performance.now();
      const { stdout } = await run("podman", args, { env });
      if (stdout !== "hi\n") throw new Error(`podman run printed ${JSON.stringify(stdout)}`);
      return performance.now() - started;
    };
    const series = { bridge: [] as number[], cold: [] as number[], bare: [] as number[] };
    const steps: [keyof typeof series, () => Promise<number>][] = [
      ["bridge", () => viaBridge()],
      ["cold", () => viaBridge(coldClient)],
      ["bare", bare],
    ];
    for (let i = 0; i < warmup; i++) for (const [, step] of steps) await step();
    for (let i = 0; i < calls; i++) {
      // Rotate the order so drift on a shared machine hits every series alike.
      for (let k = 0; k < steps.length; k++) {
        const [name, step] = steps[(i + k) % steps.length] as (typeof steps)[number];
        series[name].push(await step());
      }
    }
    let started = performance.now();
    const settled = await client.runMany(Array(batch).fill(COMMAND), { concurrency: CONCURRENCY });
    const bridgeMs = performance.now() - started;
    const failed = settled.filter((s) => s.status === "rejected" || s.value.exitCode !== 0);
    if (failed.length > 0) throw new Error(`${failed.length} of ${batch} calls failed`);
    started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < batch) {
          next++;
          await bare();
        }
      }),
    );
    const bareMs = performance.now() - started;
    return {
      bridge: summarize(series.bridge),
      cold: summarize(series.cold),
      bare: summarize(series.bare),
      bridgeRate: (batch / bridgeMs) * 1000,
      bareRate: (batch / bareMs) * 1000,
      batch,
      sandbox: backend.sandbox,
    };
  } finally {
    await client.close();
    await bridge.close();
    await backend.close();
    await coldClient.close();
    await coldBridge.close();
    await coldBackend.close();
  }
}

async function runItem(options: BenchOptions): Promise<ItemResult> {
  const m = await measure(options);
  const ms = (v: number) => round(v, 1);
  const row = (series: string, s: Summary, ratio: number | string, target: string) => [
    series,
    s.runs,
    ms(s.p50),
    ms(s.p99),
    ms(s.mean),
    ratio,
    target,
  ];
  const latency: Table = {
    caption: "One call at a time (ms)",
    columns: ["series", "calls", "p50", "p99", "mean", "p50 / bare", "target"],
    rows: [
      row(
        "client.run through the bridge (docker backend)",
        m.bridge,
        round(m.bridge.p50 / m.bare.p50, 2),
        `<= ${P50_TARGET}`,
      ),
      row("the same without the pool (pool: 0)", m.cold, round(m.cold.p50 / m.bare.p50, 2), ""),
      row("bare podman run --rm, same image and limits", m.bare, 1, ""),
    ],
  };
  const p50Ratio = m.bridge.p50 / m.bare.p50;
  const rateRatio = m.bridgeRate / m.bareRate;
  const throughput: Table = {
    caption: `${CONCURRENCY} calls at a time (${m.batch} calls each)`,
    columns: ["bridge calls/s", "bare calls/s", "bridge / bare", "target"],
    rows: [
      [
        round(m.bridgeRate, 2),
        round(m.bareRate, 2),
        round(rateRatio, 2),
        `>= ${THROUGHPUT_TARGET}`,
      ],
    ],
  };
  return {
    id: "16",
    title: "Docker backend per-call cost",
    target: `p50 <= ${P50_TARGET}x a bare podman run --rm; ${CONCURRENCY}-way throughput >= ${THROUGHPUT_TARGET}x bare`,
    met: p50Ratio <= P50_TARGET && rateRatio >= THROUGHPUT_TARGET,
    headline: `p50 ${round(p50Ratio, 2)}x bare podman run, ${CONCURRENCY}-way ${round(rateRatio, 2)}x`,
    tables: [latency, throughput],
    notes: [
      `Command \`${COMMAND}\`. Bridge: \`startEmbeddedBridge\` with \`createDockerBackend\` (its default pool of 2 containers made ahead; default limits: ${m.sandbox.memoryBytes?.max !== undefined ? m.sandbox.memoryBytes.max / MiB : "?"} MiB, ${m.sandbox.processes?.max} processes) in the runner's process, on the engine of scripts/docker-engine.mjs (Podman's API service, runc); client \`client.run\` in the same process. Bare: \`podman run --rm\` of the same image with the same limits, tmpfs, user, capabilities and network none, on the same storage.`,
      "One at a time: the three series in rotating order, after warm-up. 16 at a time: `runMany` against 16 workers each running `podman run --rm` in turn.",
    ],
    raw: m,
  };
}

export const docker: BenchItem = { id: "docker", title: "Docker backend cost", run: runItem };
