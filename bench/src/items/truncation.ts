// 5. truncateTail vs a naive split-lines tail: time ratio and peak memory ratio.
import { MB, sizeLabel } from "../lib/output.ts";
import { ChildRpc } from "../lib/proc.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const HEAP = "--max-old-space-size=6144";

async function run(options: BenchOptions): Promise<ItemResult> {
  const plan = options.quick
    ? [
        { size: 1 * MB, runs: 20 },
        { size: 64 * MB, runs: 2 },
      ]
    : [
        { size: 1 * MB, runs: 100 },
        { size: 64 * MB, runs: 7 },
        { size: 256 * MB, runs: 3 },
      ];
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  for (const { size, runs } of plan) {
    const timer = await ChildRpc.start("truncate", [], [HEAP]);
    let timing: { chars: number; bytes: number; times: Record<"truncateTail" | "naive", number[]> };
    try {
      timing = await timer.call("time", { size, runs });
    } finally {
      await timer.stop();
    }
    const memory: Record<string, { growth: number; ms: number }> = {};
    for (const impl of ["truncateTail", "naive"] as const) {
      const child = await ChildRpc.start("truncate", [], [HEAP]);
      try {
        memory[impl] = await child.call("memory", { size, impl });
      } finally {
        await child.stop();
      }
    }
    const t = summarize(timing.times.truncateTail);
    const n = summarize(timing.times.naive);
    const tm = memory.truncateTail?.growth ?? Number.NaN;
    const nm = memory.naive?.growth ?? Number.NaN;
    rows.push([
      sizeLabel(size),
      runs,
      round(t.p50, 2),
      round(n.p50, 2),
      round(t.p50 / n.p50, 3),
      round(t.p99 / n.p99, 3),
      round(tm / 1024, 0),
      round(nm / 1024, 0),
      nm > 0 ? round(tm / nm, 4) : "n/a",
    ]);
    raw.push({
      size,
      chars: timing.chars,
      utf8Bytes: timing.bytes,
      runs,
      truncateTail: t,
      naive: n,
      memory,
    });
  }
  return {
    id: "5",
    title: "Truncation: `truncateTail` vs naive split-lines",
    target: "none in the issue (ratios reported)",
    met: null,
    headline: `at ${sizeLabel(plan.at(-1)?.size ?? 0)}: time ratio ${rows.at(-1)?.[4]}, peak-memory ratio ${rows.at(-1)?.[8]}`,
    tables: [
      {
        columns: [
          "input",
          "runs",
          "truncateTail p50 ms",
          "naive p50 ms",
          "time ratio p50",
          "time ratio p99",
          "truncateTail peak growth KiB",
          "naive peak growth KiB",
          "memory ratio",
        ],
        rows,
      },
    ],
    notes: [
      "Input: lines of 10-130 characters, a tenth of them with a Latin-1 letter (2 UTF-8 bytes); limits 50 KiB / 2000 lines. Both implementations return the same text and counts (checked before timing).",
      "`truncateTail` counts UTF-8 bytes with the runtime's native `Buffer.byteLength` where it exists (a portable loop elsewhere), finds line starts backwards with `lastIndexOf` and slices the kept tail once, so it holds no copy of the lines; the naive tail builds one string per line (`split`) before keeping the last ones, which is where its memory goes.",
      'Naive: `text.split("\\n")`, `Buffer.byteLength` per line from the end, `join`. Time: both alternated on the same string in one process, GC before each run. Memory: a fresh process per implementation and size; peak RSS growth (VmHWM after - VmRSS before) while the function runs on an already built string.',
    ],
    raw,
  };
}

export const truncation: BenchItem = { id: "truncation", title: "Truncation", run };
