// 4. The client receiving the capped JSON result and the SSE stream of a 1 GB command: the
// client process's peak RSS growth, next to the bare pipe's time for the same command.
import { startBridgeProcess } from "../lib/bridges.ts";
import { MB, printCommand, sizeLabel } from "../lib/output.ts";
import { ChildRpc, PeakWatch } from "../lib/proc.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { MiB, mib, round, summarize } from "../lib/stats.ts";
import { bareThroughPipe } from "./big-output-bridge.ts";

const RSS_LIMIT = 64 * MiB;

interface ClientRun {
  ms: number;
  exitCode: number;
  stdoutBytes: number;
  retainedBytes: number;
  streamedBytes: number;
  events: number;
  growth: number;
  bridgeGrowth: number;
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const plan = options.quick
    ? [{ bytes: 64 * MB, runs: 1 }]
    : [
        { bytes: 16 * MB, runs: 5 },
        { bytes: 1000 * MB, runs: 3 },
      ];
  const bridge = await startBridgeProcess({ backend: "local", isolation: "none" });
  const client = await ChildRpc.start("client");
  const pipe = await ChildRpc.start("pipe");
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  let worst = 0;
  const once = async (command: string, mode: "json" | "sse"): Promise<ClientRun> => {
    const watch = new PeakWatch(client.pid);
    const bridgeWatch = new PeakWatch(bridge.pid);
    const answer = await client.call<Omit<ClientRun, "growth" | "bridgeGrowth">>("run", {
      url: bridge.url,
      token: bridge.token,
      command,
      mode,
    });
    return { ...answer, growth: watch.stop().growth, bridgeGrowth: bridgeWatch.stop().growth };
  };
  try {
    await once(printCommand(16 * MB), "json");
    await once(printCommand(16 * MB), "sse");
    for (const { bytes, runs } of plan) {
      const command = printCommand(bytes);
      const byMode = { json: [] as ClientRun[], sse: [] as ClientRun[] };
      const bare: number[] = [];
      for (let i = 0; i < runs; i++) {
        bare.push((await bareThroughPipe(pipe, command)).ms);
        byMode.json.push(await once(command, "json"));
        byMode.sse.push(await once(command, "sse"));
      }
      const bareP50 = summarize(bare).p50;
      for (const mode of ["json", "sse"] as const) {
        const runsOf = byMode[mode];
        for (const r of runsOf) {
          if (r.exitCode !== 0 || r.stdoutBytes !== bytes) {
            throw new Error(
              `client ${mode} run: exit ${r.exitCode}, ${r.stdoutBytes} of ${bytes} bytes`,
            );
          }
        }
        const s = summarize(runsOf.map((r) => r.ms));
        const growth = Math.max(...runsOf.map((r) => r.growth));
        if (bytes >= 1000 * MB) worst = Math.max(worst, growth);
        const first = runsOf[0];
        rows.push([
          sizeLabel(bytes),
          mode === "json" ? "JSON result" : "SSE (onOutput)",
          runs,
          round(s.p50, 0),
          round(bareP50, 0),
          round(bareP50 / s.p50, 2),
          mib(growth),
          mib(Math.max(...runsOf.map((r) => r.bridgeGrowth))),
          mib(first?.retainedBytes ?? 0),
          mode === "sse" ? `${mib(first?.streamedBytes ?? 0)} MiB in ${first?.events} events` : "",
        ]);
        raw.push({ bytes, mode, runs: runsOf, ms: s, bareMs: summarize(bare) });
      }
    }
  } finally {
    await client.stop();
    await pipe.stop();
    await bridge.stop();
  }
  const measured1G = plan.some((p) => p.bytes >= 1000 * MB);
  return {
    id: "4",
    title: "Big output received by the client",
    target: "client RSS growth < 64 MiB at 1 GB, JSON and SSE",
    met: measured1G ? worst < RSS_LIMIT : false,
    headline: `client RSS growth at most ${mib(worst)} MiB at 1 GB (JSON and SSE)`,
    tables: [
      {
        columns: [
          "output",
          "mode",
          "runs",
          "client p50 ms",
          "bare pipe p50 ms",
          "bare / client",
          "client peak RSS growth MiB (max)",
          "bridge peak RSS growth MiB (max)",
          "result stdout MiB",
          "streamed to onOutput",
        ],
        rows,
      },
    ],
    notes: [
      "Client (`createClient`, default options but a 600 s timeout) in its own process, bridge (local backend, isolation none) in another; RSS growth as in item 3, for both processes.",
      "The bridge keeps at most its cap per stream (default `maxOutputBytes` 1 MiB) in the JSON result, and forwards at most the same cap of each stream as SSE chunks; the byte totals are exact.",
    ],
    raw,
  };
}

export const bigOutputClient: BenchItem = { id: "client-output", title: "Big output, client", run };
