// Truncation cases: timing (both implementations alternated on one string) and peak memory (one
// implementation on one string, in a fresh process per case).
import { truncateTail } from "@remote-task/protocol";
import { naiveTail, sampleOutput } from "../lib/naive-tail.ts";
import { collectGarbage, memoryStatus, resetPeak, serveRpc } from "../lib/proc.ts";

type Impl = "truncateTail" | "naive";

function apply(impl: Impl, text: string) {
  if (impl === "naive") return naiveTail(text);
  const r = truncateTail(text);
  return {
    text: r.text,
    totalBytes: r.totalBytes,
    totalLines: r.totalLines,
    keptBytes: r.keptBytes,
    keptLines: r.keptLines,
  };
}

let cached: { size: number; text: string } | undefined;
function textOf(size: number): string {
  if (cached?.size !== size) cached = { size, text: sampleOutput(size) };
  return cached.text;
}

serveRpc({
  time(params: { size: number; runs: number }) {
    const text = textOf(params.size);
    const same =
      JSON.stringify(apply("truncateTail", text)) === JSON.stringify(apply("naive", text));
    if (!same) throw new Error("truncateTail and the naive tail disagree");
    const times: Record<Impl, number[]> = { truncateTail: [], naive: [] };
    for (let i = 0; i < params.runs; i++) {
      const order: Impl[] = i % 2 === 0 ? ["truncateTail", "naive"] : ["naive", "truncateTail"];
      for (const impl of order) {
        collectGarbage();
        const started = performance.now();
        apply(impl, text);
        times[impl].push(performance.now() - started);
      }
    }
    return { chars: text.length, bytes: Buffer.byteLength(text), times };
  },
  memory(params: { size: number; impl: Impl }) {
    const text = textOf(params.size);
    collectGarbage();
    resetPeak("self");
    const before = memoryStatus("self").rss;
    const started = performance.now();
    const result = apply(params.impl, text);
    const ms = performance.now() - started;
    const peak = memoryStatus("self").hwm;
    return { growth: Math.max(0, peak - before), ms, keptBytes: result.keptBytes };
  },
});
