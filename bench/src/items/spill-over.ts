// spill-over: one client with two bridges, the first small (at capacity under the burst); 200
// calls at once: failures, and how many times each command ran (counted by the bridges).
import { createClient } from "@remote-task/client";
import { startBridgeProcess } from "../lib/bridges.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const CALLS = 200;
const COMMAND = "sleep 0.1";
const FIRST = { maxConcurrent: 8, maxQueued: 0 };

async function run(options: BenchOptions): Promise<ItemResult> {
  const repeats = options.quick ? 1 : 3;
  const bridges = await Promise.all([
    startBridgeProcess({ backend: "fake", admission: FIRST }),
    startBridgeProcess({ backend: "fake" }),
  ]);
  const client = createClient({
    bridges: bridges.map((b) => ({ url: b.url, token: b.token })),
  });
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  let failures = 0;
  let twice = 0;
  let missing = 0;
  try {
    await client.run("true");
    for (let r = 0; r < repeats; r++) {
      const before = await Promise.all(bridges.map((b) => b.rpc.call<string[]>("starts")));
      const started = performance.now();
      const settled = await Promise.allSettled(
        Array.from({ length: CALLS }, () => client.run(COMMAND)),
      );
      const ms = performance.now() - started;
      const after = await Promise.all(bridges.map((b) => b.rpc.call<string[]>("starts")));
      const ran = after.map((list, i) => list.slice(before[i]?.length ?? 0));
      const runs = new Map<string, number>();
      for (const id of ran.flat()) runs.set(id, (runs.get(id) ?? 0) + 1);
      const ids = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value.sandboxId] : []));
      const failed = settled.length - ids.length;
      const extra = [...runs.values()].filter((n) => n > 1).length;
      const notRun = ids.filter((id) => runs.get(id) !== 1).length;
      failures += failed;
      twice += extra;
      missing += notRun;
      const counts = [...runs.values()];
      rows.push([
        r + 1,
        round(ms, 0),
        failed,
        ran[0]?.length ?? 0,
        ran[1]?.length ?? 0,
        Math.min(...counts),
        Math.max(...counts),
      ]);
      raw.push({ ms, failed, first: ran[0]?.length, second: ran[1]?.length, extra, notRun });
    }
  } finally {
    await client.close();
    await Promise.all(bridges.map((b) => b.stop()));
  }
  const ok = failures === 0 && twice === 0 && missing === 0;
  return {
    id: "15",
    title: "Spill-over: two bridges, the first at capacity",
    target: `${CALLS} calls: 0 failures, each command ran exactly once`,
    met: ok,
    headline: `${failures} failures, ${twice} commands run twice, ${missing} results without exactly one run (${repeats} x ${CALLS} calls)`,
    tables: [
      {
        columns: [
          "run",
          "total ms",
          "failures",
          "runs on the first bridge",
          "runs on the second",
          "min runs per command",
          "max runs per command",
        ],
        rows,
      },
    ],
    notes: [
      `One client with \`bridges: [first, second]\`; each \`${COMMAND}\` on the fake backend (100 ms, nothing runs). The first bridge admits ${FIRST.maxConcurrent} at once and queues none, so the burst fills it and it refuses the rest (429); the second is unbounded.`,
      "Runs are counted on the bridges' side (the sandbox ids each fake backend started), so a command sent to both would show as 2.",
      `Total ms p50 over the runs: ${round(summarize(raw.map((r) => (r as { ms: number }).ms)).p50, 0)}.`,
    ],
    raw,
  };
}

export const spillOver: BenchItem = { id: "spill-over", title: "Spill-over", run };
