// burst: 256 callers each `client.run("sleep 0.1")` at once against a local bridge on this machine
// (its default admission) vs the same 256 tasks ideally scheduled at the bridge's running limit.
import { createClient, type RemoteTaskClient } from "@remote-task/client";
import { healthResponseSchema } from "@remote-task/protocol";
import { startBridgeProcess } from "../lib/bridges.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const TARGET = 1.3;
const CALLERS = 256;
const COMMAND = "sleep 0.1";

interface Burst {
  ms: number;
  failures: number;
  /** Distinct failure messages, shortened. */
  reasons: string[];
}

/** Every caller at once; `clients` holds one shared client, or one per caller. */
async function burst(clients: RemoteTaskClient[]): Promise<Burst> {
  const started = performance.now();
  const settled = await Promise.allSettled(
    Array.from({ length: CALLERS }, (_, i) =>
      (clients[i % clients.length] as RemoteTaskClient).run(COMMAND),
    ),
  );
  const ms = performance.now() - started;
  const failed = settled.filter(
    (s) => s.status === "rejected" || s.value.outcome !== "exited" || s.value.exitCode !== 0,
  );
  const reasons = new Set(
    failed.map((s) =>
      s.status === "rejected"
        ? String((s.reason as Error).message).slice(0, 120)
        : `${s.value.outcome} ${s.value.exitCode}`,
    ),
  );
  return { ms, failures: failed.length, reasons: [...reasons] };
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const repeats = options.quick ? 1 : 5;
  const bridge = await startBridgeProcess({ backend: "local", isolation: "bwrap" });
  const connection = { url: bridge.url, token: bridge.token };
  const shared = createClient(connection);
  const own = Array.from({ length: CALLERS }, () => createClient(connection));
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  let headlineRatio = Number.NaN;
  let sharedFailures = 0;
  try {
    const health = healthResponseSchema.parse(await shared.health());
    const limit = health.admission?.maxConcurrent;
    if (limit === undefined) throw new Error("the local bridge reports no admission");
    const ideal = async (): Promise<Burst> => {
      // The ideal schedule: exactly the bridge's running limit in flight, never refused.
      const started = performance.now();
      const settled = await shared.runMany(Array(CALLERS).fill(COMMAND), { concurrency: limit });
      const failures = settled.filter((s) => s.status === "rejected").length;
      return { ms: performance.now() - started, failures, reasons: [] };
    };
    const IDEAL = "ideal: runMany at the running limit";
    const SHARED = `${CALLERS} callers, one shared client`;
    const cases: Array<[string, () => Promise<Burst>]> = [
      [IDEAL, ideal],
      [SHARED, () => burst([shared])],
      [`${CALLERS} callers, a client each`, () => burst(own)],
    ];
    // Warm-up: connections and the bridge's uid pool.
    await ideal();
    const results = new Map<string, Burst[]>(cases.map(([name]) => [name, []]));
    for (let r = 0; r < repeats; r++) {
      // Interleaved, the order turned round every other round.
      const order = r % 2 === 0 ? cases : [...cases].reverse();
      for (const [name, measure] of order) results.get(name)?.push(await measure());
    }
    const idealP50 = summarize((results.get(IDEAL) ?? []).map((b) => b.ms)).p50;
    for (const [name] of cases) {
      const list = results.get(name) ?? [];
      const s = summarize(list.map((b) => b.ms));
      const failures = list.reduce((sum, b) => sum + b.failures, 0);
      const ratio = s.p50 / idealP50;
      if (name === SHARED) {
        headlineRatio = ratio;
        sharedFailures = failures;
      }
      rows.push([name, s.runs, round(s.p50, 0), round(s.max, 0), round(ratio, 2), failures]);
      raw.push({ name, runs: list, totalMs: s, ratio, failures });
    }
    rows.push([
      "(bridge running limit / queue)",
      "",
      limit,
      health.admission?.maxQueued ?? "",
      "",
      "",
    ]);
  } finally {
    await Promise.all([shared, ...own].map((c) => c.close()));
    await bridge.stop();
  }
  return {
    id: "14",
    title: "Burst: 256 callers at once on a local bridge",
    target: `0 failures; burst p50 <= ${TARGET} x the ideal schedule (shared client)`,
    met: sharedFailures === 0 && headlineRatio <= TARGET,
    headline: `${round(headlineRatio, 2)} x ideal, ${sharedFailures} failures (${CALLERS} x \`${COMMAND}\`)`,
    tables: [
      {
        columns: [
          "case",
          "runs",
          "p50 total ms",
          "max total ms",
          "p50 / ideal",
          "failures (all runs)",
        ],
        rows,
      },
    ],
    notes: [
      `Each burst starts ${CALLERS} \`client.run("${COMMAND}")\` calls at once against a bridge in its own process with the local backend (bwrap) and this machine's default admission; nothing else is limited.`,
      "Ideal: the same tasks through `runMany` with `concurrency` set to the bridge's running limit (`admission.maxConcurrent` from its /health): every slot busy, nothing refused; so the ratio is the scheduling loss of the burst (refusals, waits), not the cost of the sandboxes.",
      "One shared client: the calls of one program or one agent's tool (the client learns the bridge's limit from its refusals and queues the rest). A client each: independent programs, which only have the bridge's queue and its Retry-After.",
      `Cases interleaved, ${repeats} runs each, after a warm-up.`,
    ],
    raw,
  };
}

export const burstItem: BenchItem = { id: "burst", title: "Burst", run };
