// 12 and 13. Cold starts off the critical path of the Worker, through the real container plumbing
// (the harness of apps/worker: the built Worker in Miniflare, its TaskContainer and the pool's
// WarmPoolShard Durable Objects, bwrap containers of the harness's engine):
// - `pool-batch`: a batch longer than the pool (64 calls at concurrency 16, pool 16, 2 s cold
//   start) against the same batch with no cold start and no pool: the refill must keep up.
// - `hedged-start`: no pool, a 2 s cold start of which 1 in 10 takes 20 s; 100 sequential calls
//   with hedged starts on (the default) against the same with them off: the tail a hedge cuts.
import { randomUUID } from "node:crypto";
import type { Faults } from "../../../apps/worker/test/harness/engine.ts";
import { standInImage } from "../../../apps/worker/test/harness/images.ts";
import { commandsRun, WorkerHarness } from "../../../apps/worker/test/harness/worker.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";
import { until } from "../lib/wait.ts";

const COLD_START_MS = 2_000;
const SLOW_START_MS = 20_000;
const TASK = "echo hi";
/** Room for the pool and the calls; admission above the batch (this measures the starts). */
const BASE_VARS = { MAX_INSTANCES: "400", MAX_CONCURRENT_CALLS: "256", MAX_QUEUED_CALLS: "256" };

/** `count` calls at `concurrency`; each call's latency (ms). Throws unless each exited 0. */
async function batch(harness: WorkerHarness, count: number, concurrency: number) {
  const latencyMs: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next++;
      const answer = await harness.exec({
        sandboxId: `bench-${randomUUID()}`,
        command: TASK,
        timeoutSeconds: 120,
      });
      if (answer.status !== 200 || !answer.text.includes('"code":0')) {
        throw new Error(`the Worker answered ${answer.status}: ${answer.text.slice(0, 300)}`);
      }
      latencyMs.push(answer.ms);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return latencyMs;
}

/** Waits until every container that ran a command is deleted (and, with `all`, every one). */
async function cleanedUp(harness: WorkerHarness, all = false): Promise<void> {
  await until(
    () =>
      all
        ? harness.engine.live.length === 0
        : harness.engine.live.every((record) => commandsRun(record) === 0),
    120_000,
  );
}

async function counters(harness: WorkerHarness) {
  const pool = (await harness.health()).warmPool;
  return {
    hits: pool?.hits ?? 0,
    waits: pool?.waits ?? 0,
    misses: pool?.misses ?? 0,
    hedges: pool?.hedges ?? 0,
  };
}

function problems(...harnesses: WorkerHarness[]): void {
  for (const harness of harnesses) {
    if (harness.engine.problems.length > 0) {
      throw new Error(`the harness saw unknown requests: ${harness.engine.problems.join("; ")}`);
    }
  }
}

async function poolBatch(options: BenchOptions): Promise<ItemResult> {
  const calls = 64;
  const concurrency = 16;
  const target = 16;
  const rounds = options.quick ? 1 : 3;
  const image = standInImage();
  const base = await WorkerHarness.start({ image, vars: BASE_VARS, logLines: 100_000 });
  let pool: WorkerHarness | undefined;
  try {
    pool = await WorkerHarness.start({
      image,
      vars: { ...BASE_VARS, WARM_POOL_TARGET: String(target) },
      logLines: 100_000,
    });
    const series = [
      { label: "no cold start, no pool", harness: base, faults: {}, pooled: false },
      {
        label: `2000 ms cold start, pool ${target}`,
        harness: pool,
        faults: { coldStartMs: COLD_START_MS },
        pooled: true,
      },
      {
        label: "2000 ms cold start, no pool",
        harness: base,
        faults: { coldStartMs: COLD_START_MS },
        pooled: false,
      },
    ].map((s) => ({
      ...s,
      totalMs: [] as number[],
      latencyMs: [] as number[],
      hits: 0,
      waits: 0,
      misses: 0,
      hedges: 0,
      started: 0,
    }));
    // Warm-up: the Durable Object classes, the Worker and the first container starts.
    await batch(base, 4, 4);
    await cleanedUp(base);
    // Series interleaved round by round, so drift on a shared machine hits them alike.
    for (let r = 0; r < rounds; r++) {
      for (const s of series) {
        s.harness.engine.faults = s.faults as Faults;
        if (s.pooled) {
          const full = await until(async () => {
            const warm = (await s.harness.health()).warmPool;
            return warm?.ready === target && warm.starting === 0;
          }, 180_000);
          if (!full) throw new Error("the pool did not fill");
        }
        const before = await counters(s.harness);
        const created = s.harness.engine.records.length;
        const t0 = performance.now();
        s.latencyMs.push(...(await batch(s.harness, calls, concurrency)));
        s.totalMs.push(performance.now() - t0);
        s.started += s.harness.engine.records.length - created;
        const after = await counters(s.harness);
        s.hits += after.hits - before.hits;
        s.waits += after.waits - before.waits;
        s.misses += after.misses - before.misses;
        s.hedges += after.hedges - before.hedges;
        await cleanedUp(s.harness);
      }
    }
    problems(base, pool);
    const baseline = summarize(series[0]?.totalMs ?? []).p50;
    const ratio = (s: (typeof series)[number]) => summarize(s.totalMs).p50 / baseline;
    const pooled = series[1] as (typeof series)[number];
    const table: Table = {
      caption: `Batches of ${calls} calls (\`${TASK}\`) at concurrency ${concurrency}, ${rounds} round(s) each, the pool full before each:`,
      columns: [
        "series",
        "batch s (p50)",
        "batch / no cold start",
        "call p50 ms",
        "call p99 ms",
        "pool hits / waits / misses",
        "hedges",
        "containers started",
      ],
      rows: series.map((s) => {
        const latency = summarize(s.latencyMs);
        return [
          s.label,
          round(summarize(s.totalMs).p50 / 1000, 2),
          round(ratio(s), 2),
          round(latency.p50, 0),
          round(latency.p99, 0),
          s.pooled ? `${s.hits} / ${s.waits} / ${s.misses}` : "-",
          s.hedges,
          s.started,
        ];
      }),
    };
    return {
      id: "12",
      title: "Worker: a batch longer than the warm pool",
      target: "64 calls at concurrency 16, pool 16, 2 s cold start: within 1.5x of no cold start",
      met: ratio(pooled) <= 1.5,
      headline: `64 calls at 16 with pool 16 and a 2 s cold start: x${round(ratio(pooled), 2)} the batch with no cold start (no pool: x${round(ratio(series[2] as (typeof series)[number]), 2)})`,
      tables: [table],
      notes: [
        "Each call is `POST /exec` with a fresh sandbox id to the built Worker in Miniflare; containers are bubblewrap process trees of the harness's engine (apps/worker/test/harness), started with the Worker's own PID 1 and held back by the injected cold start.",
        "\"No cold start\" still pays this machine's real container start (a bubblewrap process tree and the harness's Node relay per container); on Cloudflare the whole start is the cold start the pool hides.",
        "A call that finds no container ready waits for one the pool is starting (the pool starts one for each waiting call and replaces each ready one it lends at once); hits (ready when asked), waits (lent once started) and misses (own start) come from the Worker's /health.",
        "Containers started: every container the harness engine created during the batches (the pool's refill, calls' own starts, hedges), the pool's own fill before each batch excepted. This harness's container starts share the machine's 2 cores with the calls, so each start the pool makes beyond what the calls need slows the batch.",
      ],
      raw: series.map(({ harness: _h, ...s }) => s),
    };
  } finally {
    await pool?.close();
    await base.close();
  }
}

async function hedgedStart(options: BenchOptions): Promise<ItemResult> {
  const calls = options.quick ? 20 : 100;
  const image = standInImage();
  const faults: Faults = {
    coldStartMs: COLD_START_MS,
    slowStart: { every: 10, ms: SLOW_START_MS },
  };
  const hedged = await WorkerHarness.start({ image, vars: BASE_VARS });
  let unhedged: WorkerHarness | undefined;
  try {
    unhedged = await WorkerHarness.start({
      image,
      vars: { ...BASE_VARS, HEDGE_START_AFTER_MS: "off" },
    });
    const series = [
      { label: "hedged starts (auto)", harness: hedged, latencyMs: [] as number[], hedges: 0 },
      { label: "hedged starts off", harness: unhedged, latencyMs: [] as number[], hedges: 0 },
    ];
    for (const s of series) {
      // Warm-up with plain 2 s starts: the isolate has seen a few starts (the observed delay).
      s.harness.engine.faults = { coldStartMs: COLD_START_MS };
      await batch(s.harness, 4, 1);
      s.harness.engine.faults = faults;
    }
    // In blocks of 10, alternating, so drift on a shared machine hits both alike.
    for (let done = 0; done < calls; done += 10) {
      for (const s of series) {
        const before = await counters(s.harness);
        s.latencyMs.push(...(await batch(s.harness, Math.min(10, calls - done), 1)));
        s.hedges += (await counters(s.harness)).hedges - before.hedges;
      }
    }
    for (const s of series) await cleanedUp(s.harness, true);
    problems(hedged, unhedged);
    const p99 = (s: (typeof series)[number]) => summarize(s.latencyMs).p99;
    const on = series[0] as (typeof series)[number];
    const off = series[1] as (typeof series)[number];
    return {
      id: "13",
      title: "Worker: hedged starts against a long cold-start tail",
      target: `no pool, 1 start in 10 taking 20 s instead of 2 s: p99 of ${calls} sequential calls under 6 s`,
      met: p99(on) < 6_000,
      headline: `p99 ${round(p99(on) / 1000, 2)} s with hedged starts vs ${round(p99(off) / 1000, 2)} s without (${calls} sequential calls, 1 start in 10 of 20 s)`,
      tables: [
        {
          caption: `${calls} sequential calls (\`${TASK}\`), no pool, every 10th container start 20 s, the others 2 s:`,
          columns: ["series", "calls", "p50 ms", "p99 ms", "max ms", "hedges"],
          rows: series.map((s) => {
            const latency = summarize(s.latencyMs);
            return [
              s.label,
              latency.runs,
              round(latency.p50, 0),
              round(latency.p99, 0),
              round(latency.max, 0),
              s.hedges,
            ];
          }),
        },
      ],
      notes: [
        "Every 10th container the harness engine creates (hedges included) starts after 20 s, the others after 2 s, plus this machine's real container start.",
        "With hedged starts on (the default, HEDGE_START_AFTER_MS unset), a start running a tenth longer than three in four recent starts took gets a second container; the call runs in whichever is ready first and the other is destroyed.",
      ],
      raw: series.map(({ harness: _h, ...s }) => ({ ...s, latency: summarize(s.latencyMs) })),
    };
  } finally {
    await unhedged?.close();
    await hedged.close();
  }
}

export const poolBatchItem: BenchItem = {
  id: "pool-batch",
  title: "Worker: a batch longer than the warm pool, real Durable Objects",
  run: poolBatch,
};

export const hedgedStartItem: BenchItem = {
  id: "hedged-start",
  title: "Worker: hedged starts against a long cold-start tail, real Durable Objects",
  run: hedgedStart,
};
