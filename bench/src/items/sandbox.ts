// 8. The local backend's per-call cost with its boundary and limits in force: `client.run("echo
// hi")` through the bridge against a bare spawn of the same command (isolation none: `sh -c`;
// bwrap: bubblewrap with the very same flags), one at a time and 16 at a time.
import { fileURLToPath } from "node:url";
import { createClient } from "@remote-task/client";
import { startBridgeProcess } from "../lib/bridges.ts";
import { ChildRpc, cpuTimeMs } from "../lib/proc.ts";
import type { BenchItem, BenchOptions, Cell, ItemResult, Table } from "../lib/report.ts";
import { round, type Summary, summarize } from "../lib/stats.ts";

const COMMAND = "echo hi";
const CONCURRENCY = 16;
/** p50 through the bridge over the bare spawn, per isolation; throughput at 16 over bare. */
const P50_TARGET = { none: 2.0, bwrap: 1.3 } as const;
const THROUGHPUT_TARGET = 0.6;

type Isolation = keyof typeof P50_TARGET;

interface Measured {
  isolation: Isolation;
  bridge: Summary;
  bare: Summary;
  direct: Summary;
  requestPath: Summary;
  bridgeRate: number;
  bareRate: number;
  /** CPU ms per call of the bridge process and of the bare spawner, at concurrency 16. */
  bridgeCpuPerCall: number;
  bareCpuPerCall: number;
  /** The bridge process's CPU ms per call with the fake backend: the request path alone. */
  requestPathCpuPerCall: number;
  /** The client's (this process's) CPU ms per call. */
  clientCpuPerCall: number;
  sandbox: unknown;
}

async function measure(isolation: Isolation, options: BenchOptions): Promise<Measured> {
  const calls = options.quick ? 60 : 400;
  const warmup = options.quick ? 10 : 40;
  const batch = options.quick ? 64 : 320;
  const repeats = options.quick ? 1 : 3;
  const local = await startBridgeProcess({ backend: "local", isolation });
  const fake = await startBridgeProcess({ backend: "fake" });
  // The child imports the backend's sources (its bubblewrap flags); see lib/ts-source.ts.
  const spawner = await ChildRpc.start(
    "spawn",
    [],
    ["--import", fileURLToPath(new URL("../lib/ts-source.ts", import.meta.url))],
  );
  const client = createClient({ url: local.url, token: local.token });
  const fakeClient = createClient({ url: fake.url, token: fake.token });
  try {
    if (local.isolation !== isolation)
      throw new Error(`bridge runs ${local.isolation}, not ${isolation}`);
    const health = await fetch(`${local.url}/health`, {
      headers: { authorization: `Bearer ${local.token}` },
    });
    const { sandbox } = (await health.json()) as { sandbox?: unknown };
    const viaBridge = async (c = client) => {
      const started = performance.now();
      const result = await c.run(COMMAND);
      const elapsed = performance.now() - started;
      if (result.exitCode !== 0) throw new Error(`client.run exited ${result.exitCode}`);
      return elapsed;
    };
    const bare = () => spawner.call<number>("bare", { isolation, command: COMMAND });
    const direct = () => spawner.call<number>("direct", { isolation, command: COMMAND });
    const series: Record<"bridge" | "bare" | "direct" | "requestPath", number[]> = {
      bridge: [],
      bare: [],
      direct: [],
      requestPath: [],
    };
    const steps: [keyof typeof series, () => Promise<number>][] = [
      ["bridge", () => viaBridge()],
      ["bare", bare],
      ["direct", direct],
      // The fake backend answers `echo hi` at once: what remains is the HTTP request path.
      ["requestPath", () => viaBridge(fakeClient)],
    ];
    for (let i = 0; i < warmup; i++) for (const [, step] of steps) await step();
    // Rotate the order every call so drift and ordering effects hit every series alike.
    for (let i = 0; i < calls; i++) {
      for (let k = 0; k < steps.length; k++) {
        const [name, step] = steps[(i + k) % steps.length] as (typeof steps)[number];
        series[name].push(await step());
      }
    }

    const rates = { bridge: [] as number[], bare: [] as number[] };
    const cpu = { bridge: 0, bare: 0, requestPath: 0, client: 0 };
    for (let r = 0; r < repeats; r++) {
      // The request path's share: the same batch against the fake backend.
      const fakeCpu = cpuTimeMs(fake.pid);
      await fakeClient.runMany(Array(batch).fill(COMMAND), { concurrency: CONCURRENCY });
      cpu.requestPath += cpuTimeMs(fake.pid) - fakeCpu;
      const clientCpu = cpuTimeMs("self");
      const bridgeCpu = cpuTimeMs(local.pid);
      let started = performance.now();
      const settled = await client.runMany(Array(batch).fill(COMMAND), {
        concurrency: CONCURRENCY,
      });
      const bridgeMs = performance.now() - started;
      cpu.bridge += cpuTimeMs(local.pid) - bridgeCpu;
      cpu.client += cpuTimeMs("self") - clientCpu;
      const failed = settled.filter((s) => s.status === "rejected" || s.value.exitCode !== 0);
      if (failed.length > 0) throw new Error(`${failed.length} of ${batch} calls failed`);
      const bareCpu = cpuTimeMs(spawner.pid);
      started = performance.now();
      const bareMs = await spawner.call<number>("bareBatch", {
        isolation,
        command: COMMAND,
        count: batch,
        concurrency: CONCURRENCY,
      });
      cpu.bare += cpuTimeMs(spawner.pid) - bareCpu;
      rates.bridge.push((batch / bridgeMs) * 1000);
      rates.bare.push((batch / bareMs) * 1000);
    }
    const median = (list: number[]) => summarize(list).p50;
    return {
      isolation,
      bridge: summarize(series.bridge),
      bare: summarize(series.bare),
      direct: summarize(series.direct),
      requestPath: summarize(series.requestPath),
      bridgeRate: median(rates.bridge),
      bareRate: median(rates.bare),
      bridgeCpuPerCall: cpu.bridge / (batch * repeats),
      bareCpuPerCall: cpu.bare / (batch * repeats),
      requestPathCpuPerCall: cpu.requestPath / (batch * repeats),
      clientCpuPerCall: cpu.client / (batch * repeats),
      sandbox,
    };
  } finally {
    await client.close();
    await fakeClient.close();
    await local.stop();
    await fake.stop();
    await spawner.stop();
  }
}

async function bwrapUsable(): Promise<boolean> {
  const { createLocalBackend } = await import("@remote-task/bridge/local");
  try {
    await createLocalBackend({ isolation: "bwrap" }).close();
    return true;
  } catch {
    return false;
  }
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const isolations: Isolation[] = (await bwrapUsable()) ? ["none", "bwrap"] : ["none"];
  const results: Measured[] = [];
  for (const isolation of isolations) results.push(await measure(isolation, options));
  const ms = (v: number) => round(v, 2);
  const latency: Table = {
    caption: "One call at a time (ms)",
    columns: ["isolation", "series", "calls", "p50", "p99", "mean", "p50 / bare", "p50 target"],
    rows: results.flatMap((m) => {
      const row = (series: string, s: Summary, ratio: Cell, target: Cell): Cell[] => [
        m.isolation,
        series,
        s.runs,
        ms(s.p50),
        ms(s.p99),
        ms(s.mean),
        ratio,
        target,
      ];
      const vsBare = (s: Summary) => round(s.p50 / m.bare.p50, 2);
      return [
        row(
          "client.run through the bridge",
          m.bridge,
          vsBare(m.bridge),
          `<= ${P50_TARGET[m.isolation]}`,
        ),
        row(
          `bare spawn (${m.isolation === "bwrap" ? "bwrap, same flags" : "sh -c"})`,
          m.bare,
          1,
          "",
        ),
        row("the backend alone (start, read, exit, destroy)", m.direct, vsBare(m.direct), ""),
        row("client.run, fake backend (request path only)", m.requestPath, "", ""),
      ];
    }),
  };
  const throughput: Table = {
    caption: `${CONCURRENCY} calls at a time`,
    columns: [
      "isolation",
      "bridge calls/s",
      "bare calls/s",
      "bridge / bare",
      "target",
      "bridge process CPU ms per call",
      "of which request path (fake backend)",
      "client CPU ms per call",
      "bare spawner CPU ms per call",
    ],
    rows: results.map((m) => [
      m.isolation,
      round(m.bridgeRate, 0),
      round(m.bareRate, 0),
      round(m.bridgeRate / m.bareRate, 2),
      `>= ${THROUGHPUT_TARGET}`,
      round(m.bridgeCpuPerCall, 2),
      round(m.requestPathCpuPerCall, 2),
      round(m.clientCpuPerCall, 2),
      round(m.bareCpuPerCall, 2),
    ]),
  };
  const met = results.every(
    (m) =>
      m.bridge.p50 / m.bare.p50 <= P50_TARGET[m.isolation] &&
      m.bridgeRate / m.bareRate >= THROUGHPUT_TARGET,
  );
  const headline = results
    .map(
      (m) =>
        `${m.isolation}: p50 ${round(m.bridge.p50 / m.bare.p50, 2)}x bare, ${CONCURRENCY}-way ${round(m.bridgeRate / m.bareRate, 2)}x`,
    )
    .join("; ");
  const gap = results.map((m) => {
    const total = m.bridge.p50 - m.bare.p50;
    const backend = m.direct.p50 - m.bare.p50;
    return `${m.isolation}: of the ${ms(total)} ms p50 gap to the bare spawn, the backend alone accounts for ${ms(backend)} ms and the rest (${ms(total - backend)} ms) is the HTTP request path, client included (the fake backend's whole call takes ${ms(m.requestPath.p50)} ms).`;
  });
  return {
    id: "10",
    title: "Local sandbox per-call cost with its limits in force",
    target: `p50 <= ${P50_TARGET.none}x bare sh -c (none), <= ${P50_TARGET.bwrap}x bare bwrap (bwrap); ${CONCURRENCY}-way throughput >= ${THROUGHPUT_TARGET}x bare`,
    met,
    headline,
    tables: [latency, throughput],
    notes: [
      `Command \`${COMMAND}\`. Bridge: \`startEmbeddedBridge\` with \`createLocalBackend({isolation})\` (default limits, as /health reports them below) in its own process; client: \`client.run\` in the runner. Bare: \`child_process.spawn\` in a process of its own, timed from spawn to the closed output, as the same unprivileged uid when root, for bwrap with the backend's own flags (no cgroup). "The backend alone" drives the backend in that same process without HTTP.`,
      `One at a time: ${options.quick ? 10 : 40} warm-up rounds, then the four series in rotating order every round. ${CONCURRENCY} at a time: \`runMany\` of ${options.quick ? 64 : 320} calls against the same number of bare spawns, ${options.quick ? 1 : 3} round(s), median.`,
      ...gap,
      ...results.map((m) => `${m.isolation}: /health sandbox ${JSON.stringify(m.sandbox)}`),
    ],
    raw: results,
  };
}

export const sandbox: BenchItem = { id: "sandbox", title: "Local sandbox cost", run };
