// 7. Fan-out of 200 tasks against a backend with a simulated 2 s container cold start vs none.
import { createClient, type SettledTask } from "@remote-task/client";
import { startBridgeProcess } from "../lib/bridges.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const TASK_MS = 50;

interface Batch {
  totalMs: number;
  /** Bridge-side duration of each call (from the request's arrival to the exit), cold start included. */
  taskMs: number[];
  /** When each task settled, from the start of the batch (client side). */
  settledAtMs: number[];
}

async function batch(
  client: ReturnType<typeof createClient>,
  tasks: number,
  concurrency: number,
): Promise<Batch> {
  const command = `sleep ${TASK_MS / 1000}`;
  const settledAtMs: number[] = [];
  const started = performance.now();
  const settled: SettledTask[] = await client.runMany(Array(tasks).fill(command), {
    concurrency,
    onProgress: () => settledAtMs.push(performance.now() - started),
  });
  const totalMs = performance.now() - started;
  const taskMs = settled.map((s) => {
    if (s.status === "rejected") throw s.reason;
    return s.value.durationMs;
  });
  return { totalMs, taskMs, settledAtMs };
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const tasks = 200;
  const coldMs = options.quick ? 500 : 2000;
  const concurrencies = options.quick ? [64, 200] : [16, 64, 200];
  const cold = await startBridgeProcess({ backend: "fake", startLatencyMs: coldMs });
  const warm = await startBridgeProcess({ backend: "fake", startLatencyMs: 0 });
  const coldClient = createClient({ url: cold.url, token: cold.token, maxConnections: 256 });
  const warmClient = createClient({ url: warm.url, token: warm.token, maxConnections: 256 });
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  try {
    await warmClient.runMany(Array(200).fill("true"), { concurrency: 200 });
    await coldClient.runMany(Array(200).fill("true"), { concurrency: 200 });
    for (const concurrency of concurrencies) {
      const w = await batch(warmClient, tasks, concurrency);
      const c = await batch(coldClient, tasks, concurrency);
      const waves = Math.ceil(tasks / concurrency);
      for (const [label, b, perTask] of [
        ["0 s", w, TASK_MS],
        [`${coldMs / 1000} s`, c, coldMs + TASK_MS],
      ] as const) {
        const task = summarize(b.taskMs);
        const settled = summarize(b.settledAtMs);
        rows.push([
          concurrency,
          label,
          tasks,
          round(task.p50, 0),
          round(task.p99, 0),
          round(settled.p50, 0),
          round(b.totalMs, 0),
          waves * perTask,
          round(b.totalMs / (waves * perTask), 2),
        ]);
        raw.push({
          concurrency,
          coldStartMs: label === "0 s" ? 0 : coldMs,
          tasks,
          waves,
          task,
          settled,
          totalMs: b.totalMs,
        });
      }
      rows.push([
        concurrency,
        "cold / warm total",
        "",
        "",
        "",
        "",
        round(c.totalMs / w.totalMs, 1),
        "",
        "",
      ]);
    }
  } finally {
    await coldClient.close();
    await warmClient.close();
    await cold.stop();
    await warm.stop();
  }
  return {
    id: "7",
    title: "Cold-start sensitivity",
    target: "none (input for a warm-pool decision)",
    met: null,
    headline: `cold start dominates: with ${coldMs / 1000} s cold start a ${TASK_MS} ms task takes ~${coldMs / 1000} s; a batch takes ceil(${tasks}/concurrency) x cold start`,
    tables: [
      {
        columns: [
          "concurrency",
          "cold start",
          "tasks",
          "per-task p50 ms",
          "per-task p99 ms",
          "half settled at ms",
          "total ms",
          "waves x (cold + task) ms",
          "total / that",
        ],
        rows,
      },
    ],
    notes: [
      `${tasks} tasks of \`sleep ${TASK_MS / 1000}\` on the fake backend, one bridge process with \`startLatencyMs: ${coldMs}\` (every sandbox cold) and one with 0, batches alternated; client maxConnections 256.`,
      "Per-task latency is the bridge-reported `durationMs` (request arrival to exit, cold start included); `half settled at` is when the 100th task settled, from the batch start.",
      "Every call here gets a fresh sandbox, so every call pays the cold start: total time is about ceil(tasks / concurrency) x (cold start + task), and per-task latency is about the cold start whatever the concurrency. Only a warm pool (or higher concurrency) shortens it.",
    ],
    raw,
  };
}

export const coldStart: BenchItem = { id: "coldstart", title: "Cold-start sensitivity", run };
