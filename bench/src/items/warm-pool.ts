// 9. The warm pool of never-reused containers, through the Worker with the real container
// plumbing (the harness of apps/worker) and an injected 2000 ms cold start: per-call latency of
// bursts with WARM_POOL_TARGET >= concurrency, 200-task batches at concurrency 16 and 64 with
// pool targets 16 and 64, each against the same with no cold start at all; and a soak whose
// container records show that no container served two calls, every container was deleted, and
// the pool stayed within its ceiling (half of MAX_INSTANCES).
import { randomUUID } from "node:crypto";
import { type ContainerRecord, isLive } from "../../../apps/worker/test/harness/engine.ts";
import { standInImage } from "../../../apps/worker/test/harness/images.ts";
import { commandsRun, WorkerHarness } from "../../../apps/worker/test/harness/worker.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, type Summary, summarize } from "../lib/stats.ts";
import { sleep, until } from "../lib/wait.ts";

const COLD_START_MS = 2000;
const TASK = "sleep 0.05";
/** Worker variables every harness here runs with: room for two pools of 64 and the calls. */
// Admission sized above the largest batch: this item measures the pool, not the Worker's
// per-isolate admission (whose defaults, 32 running and 32 waiting, refuse a 64-wide batch whose
// previous calls still hold their slots while their containers are destroyed).
const BASE_VARS = { MAX_INSTANCES: "400", MAX_CONCURRENT_CALLS: "256", MAX_QUEUED_CALLS: "256" };
/** Most the pool may hold while calls drain it: half of MAX_INSTANCES. */
const POOL_CEILING = Number(BASE_VARS.MAX_INSTANCES) / 2;
const LOG_LINES = 500_000;

/** One call; throws unless it ran and exited 0. */
async function call(harness: WorkerHarness, sandboxId: string): Promise<number> {
  const answer = await harness.exec({ sandboxId, command: TASK, timeoutSeconds: 300 });
  if (answer.status !== 200 || !answer.text.includes('"code":0')) {
    throw new Error(`the Worker answered ${answer.status}: ${answer.text.slice(0, 300)}`);
  }
  return answer.ms;
}

interface Calls {
  ids: string[];
  latencyMs: number[];
}

/** `count` calls at `concurrency`; returns each call's id and latency. */
async function batch(harness: WorkerHarness, count: number, concurrency: number): Promise<Calls> {
  const calls: Calls = { ids: [], latencyMs: [] };
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next++;
      const sandboxId = `bench-${randomUUID()}`;
      calls.ids.push(sandboxId);
      calls.latencyMs.push(await call(harness, sandboxId));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return calls;
}

/** What the bridge logged of each call: warm or cold, and how long its sandbox took to start. */
function logged(harness: WorkerHarness, ids: readonly string[]) {
  const wanted = new Set(ids);
  const entries = harness
    .bridgeLog()
    .filter((entry) => entry.event === "exec" && wanted.has(entry.sandboxId as string));
  const warm = entries.filter((entry) => entry.warm === true);
  return {
    logged: entries.length,
    warm: warm.length,
    cold: entries.filter((entry) => entry.warm === false).length,
    warmStartMs: warm.map((entry) => entry.startMs as number),
  };
}

async function poolFull(harness: WorkerHarness, target: number): Promise<void> {
  const full = await until(async () => {
    const pool = (await harness.health()).warmPool;
    return pool?.ready === target && pool.starting === 0;
  }, 180_000);
  if (!full)
    throw new Error(
      `the pool did not fill to ${target}: ${JSON.stringify(await harness.health())}`,
    );
}

/** Waits until every container that ran a command is deleted. */
async function callsCleanedUp(harness: WorkerHarness): Promise<void> {
  await until(() => harness.engine.live.every((record) => commandsRun(record) === 0), 120_000);
}

/** Samples the pool's own count while `work` runs: the most ready plus starting at once. */
async function sampled<T>(harness: WorkerHarness, work: Promise<T>) {
  let most = 0;
  let mostLive = 0;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      const pool = (await harness.health()).warmPool;
      most = Math.max(most, (pool?.ready ?? 0) + (pool?.starting ?? 0));
      mostLive = Math.max(mostLive, harness.engine.live.length);
      await sleep(250);
    }
  })();
  try {
    return { value: await work, most: () => most, mostLive: () => mostLive };
  } finally {
    done = true;
    await sampler;
  }
}

function claimsOf(harness: WorkerHarness, shards: number): Promise<number[]> {
  return harness.shardStats(shards).then((all) => all.map((shard) => shard.claims));
}

function started(record: ContainerRecord, event: string): number | undefined {
  return record.events.find((e) => e.event === event)?.at;
}

/** The three series each comparison runs, in this order: the baseline, the pool, no pool. */
function seriesOf(base: WorkerHarness, pool: WorkerHarness, target: number) {
  return [
    { label: "no cold start, no pool", harness: base, coldStartMs: 0, pooled: false },
    {
      label: `2000 ms cold start, pool ${target}`,
      harness: pool,
      coldStartMs: COLD_START_MS,
      pooled: true,
    },
    {
      label: "2000 ms cold start, no pool",
      harness: base,
      coldStartMs: COLD_START_MS,
      pooled: false,
    },
  ];
}

interface LatencyCase {
  label: string;
  pooled: boolean;
  concurrency: number;
  latencyMs: number[];
  warm: number;
  cold: number;
}

async function latency(
  base: WorkerHarness,
  pool: WorkerHarness,
  target: number,
  quick: boolean,
): Promise<{ table: Table; raw: LatencyCase[]; met: boolean }> {
  const cases: LatencyCase[] = [];
  for (const concurrency of [1, 16]) {
    const rounds = concurrency === 1 ? (quick ? 3 : 12) : quick ? 2 : 5;
    const series = seriesOf(base, pool, target).map((s) => ({
      ...s,
      result: {
        label: s.label,
        pooled: s.pooled,
        concurrency,
        latencyMs: [],
        warm: 0,
        cold: 0,
      } as LatencyCase,
    }));
    // Series interleaved round by round, so drift on a shared machine hits them alike.
    for (let r = 0; r < rounds; r++) {
      for (const s of series) {
        s.harness.engine.faults = { coldStartMs: s.coldStartMs };
        if (s.pooled) await poolFull(s.harness, target);
        const calls = await batch(s.harness, concurrency, concurrency);
        await sleep(300);
        const log = logged(s.harness, calls.ids);
        s.result.latencyMs.push(...calls.latencyMs);
        s.result.warm += log.warm;
        s.result.cold += log.cold;
        await callsCleanedUp(s.harness);
      }
    }
    cases.push(...series.map((s) => s.result));
  }
  let met = true;
  const rows: Table["rows"] = [];
  for (const c of cases) {
    const summary = summarize(c.latencyMs);
    const baseline = cases.find(
      (b) => b.concurrency === c.concurrency && b.label.startsWith("no cold"),
    );
    const ratio = summary.p50 / summarize(baseline?.latencyMs ?? []).p50;
    if (c.pooled && ratio > 1.2) met = false;
    rows.push([
      c.label,
      c.concurrency,
      summary.runs,
      `${c.warm} / ${c.cold}`,
      round(summary.p50, 0),
      round(summary.p99, 0),
      round(ratio, 2),
    ]);
  }
  return {
    table: {
      caption: "Bursts of `concurrency` calls (the pool full before each burst):",
      columns: [
        "series",
        "concurrency",
        "calls",
        "warm / cold",
        "p50 ms",
        "p99 ms",
        "p50 / no cold start p50",
      ],
      rows,
    },
    raw: cases,
    met,
  };
}

interface BatchCase {
  label: string;
  concurrency: number;
  totalMs: number;
  latency: Summary;
  warm: number;
  cold: number;
  warmStartMs: Summary;
  claimsPerShard?: number[];
  mostPooled?: number;
  mostLive: number;
  containers: number;
}

async function batches(
  base: WorkerHarness,
  pool: WorkerHarness,
  tasks: number,
  concurrencies: number[],
): Promise<{ table: Table; raw: BatchCase[]; met: boolean }> {
  const cases: BatchCase[] = [];
  for (const concurrency of concurrencies) {
    const target = concurrency;
    const shards = Math.ceil(target / 8);
    await pool.redeploy({ ...BASE_VARS, WARM_POOL_TARGET: String(target) });
    for (const s of seriesOf(base, pool, target)) {
      s.harness.engine.faults = { coldStartMs: s.coldStartMs };
      if (s.pooled) await poolFull(s.harness, target);
      const claimsBefore = s.pooled ? await claimsOf(s.harness, shards) : [];
      const recordsBefore = s.harness.engine.records.length;
      const t0 = performance.now();
      const run = await sampled(s.harness, batch(s.harness, tasks, concurrency));
      const totalMs = performance.now() - t0;
      await sleep(500);
      const log = logged(s.harness, run.value.ids);
      const claimsAfter = s.pooled ? await claimsOf(s.harness, shards) : [];
      cases.push({
        label: s.label,
        concurrency,
        totalMs,
        latency: summarize(run.value.latencyMs),
        warm: log.warm,
        cold: log.cold,
        warmStartMs: summarize(log.warmStartMs),
        ...(s.pooled
          ? {
              claimsPerShard: claimsAfter.map((n, i) => n - (claimsBefore[i] ?? 0)),
              mostPooled: run.most(),
            }
          : {}),
        mostLive: run.mostLive(),
        containers: s.harness.engine.records.length - recordsBefore,
      });
      await callsCleanedUp(s.harness);
    }
  }
  let met = true;
  const rows: Table["rows"] = [];
  for (const c of cases) {
    const baseline = cases.find(
      (b) => b.concurrency === c.concurrency && b.label.startsWith("no cold"),
    );
    const ratio = c.totalMs / (baseline?.totalMs ?? Number.NaN);
    if (c.claimsPerShard !== undefined && ratio > 1.5) met = false;
    rows.push([
      c.label,
      c.concurrency,
      round(c.totalMs / 1000, 1),
      round(ratio, 2),
      `${c.warm} / ${c.cold}`,
      round(c.latency.p50, 0),
      round(c.latency.p99, 0),
      c.claimsPerShard === undefined
        ? "-"
        : `${round(c.warmStartMs.p50, 0)} / ${round(c.warmStartMs.p99, 0)}`,
      c.claimsPerShard?.join(" ") ?? "-",
      c.mostPooled ?? "-",
      c.mostLive,
    ]);
  }
  return {
    table: {
      caption: `Batches of ${tasks} tasks (\`${TASK}\`), pool target = concurrency:`,
      columns: [
        "series",
        "concurrency",
        "batch s",
        "batch / no cold start",
        "warm / cold",
        "call p50 ms",
        "call p99 ms",
        "warm start p50 / p99 ms",
        "claims per shard",
        "most pooled",
        "most live containers",
      ],
      rows,
    },
    raw: cases,
    met,
  };
}

async function soak(pool: WorkerHarness, calls: number, concurrency: number, target: number) {
  // Every container from here on: the pool's fill and the soak's calls (the previous pool's,
  // which this redeploy drains, were created before).
  const first = pool.engine.records.length;
  await pool.redeploy({ ...BASE_VARS, WARM_POOL_TARGET: String(target) });
  pool.engine.faults = { coldStartMs: COLD_START_MS };
  await poolFull(pool, target);
  const t0 = performance.now();
  const run = await sampled(pool, batch(pool, calls, concurrency));
  const seconds = (performance.now() - t0) / 1000;
  await sleep(500);
  const log = logged(pool, run.value.ids);
  // Turn the pool off: its shards drain at their next alarm (within a minute), and then every
  // container the soak created must be gone.
  await pool.redeploy({ ...BASE_VARS, WARM_POOL_TARGET: "0" });
  const drained = await until(() => pool.engine.live.length === 0, 180_000);
  const records = pool.engine.records.slice(first);
  const servedTwice = records.filter((record) => commandsRun(record) > 1).length;
  const served = records.filter((record) => commandsRun(record) === 1).length;
  const leftRunning = records.filter(isLive).length;
  const neverUsed = records.filter(
    (record) => commandsRun(record) === 0 && started(record, "running") !== undefined,
  ).length;
  const met =
    drained &&
    servedTwice === 0 &&
    leftRunning === 0 &&
    run.most() <= POOL_CEILING &&
    served === calls;
  return {
    met,
    table: {
      caption: `Soak: ${calls} calls at concurrency ${concurrency}, pool target ${target}, 2000 ms cold start, then the pool turned off:`,
      columns: [
        "calls",
        "seconds",
        "warm / cold",
        "containers created",
        "served one call",
        "served two or more",
        "started, never used (drained or recycled)",
        "left running at the end",
        "most pooled (ready + starting)",
        "most live containers",
      ],
      rows: [
        [
          calls,
          round(seconds, 0),
          `${log.warm} / ${log.cold}`,
          records.length,
          served,
          servedTwice,
          neverUsed,
          leftRunning,
          `${run.most()} (target ${target}, ceiling ${POOL_CEILING})`,
          run.mostLive(),
        ],
      ],
    } satisfies Table,
    raw: {
      calls,
      seconds,
      warm: log.warm,
      cold: log.cold,
      logged: log.logged,
      containers: records.length,
      served,
      servedTwice,
      neverUsed,
      leftRunning,
      mostPooled: run.most(),
      mostLive: run.mostLive(),
      latency: summarize(run.value.latencyMs),
    },
  };
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const quick = options.quick;
  const image = standInImage();
  const base = await WorkerHarness.start({ image, vars: BASE_VARS, logLines: LOG_LINES });
  let pool: WorkerHarness | undefined;
  try {
    pool = await WorkerHarness.start({
      image,
      vars: { ...BASE_VARS, WARM_POOL_TARGET: "16" },
      logLines: LOG_LINES,
    });
    await pool.health();
    // Warm-up: the Durable Object classes, the Worker and the first container starts.
    await batch(base, 4, 4);
    await callsCleanedUp(base);
    const bursts = await latency(base, pool, 16, quick);
    const batched = await batches(base, pool, quick ? 32 : 200, quick ? [16] : [16, 64]);
    const soaked = await soak(pool, quick ? 100 : 2000, 8, 16);
    for (const harness of [base, pool]) {
      if (harness.engine.problems.length > 0) {
        throw new Error(`the harness saw unknown requests: ${harness.engine.problems.join("; ")}`);
      }
    }
    const p50 = (concurrency: number, label: (c: LatencyCase) => boolean) =>
      summarize(bursts.raw.find((c) => c.concurrency === concurrency && label(c))?.latencyMs ?? [])
        .p50;
    const pooledP50 = p50(16, (c) => c.pooled);
    const noColdP50 = p50(16, (c) => c.label.startsWith("no cold"));
    const batchRatio = (concurrency: number) => {
      const pooled = batched.raw.find(
        (c) => c.concurrency === concurrency && c.claimsPerShard !== undefined,
      );
      const none = batched.raw.find(
        (c) => c.concurrency === concurrency && c.label.startsWith("no cold"),
      );
      return pooled === undefined || none === undefined
        ? Number.NaN
        : round(pooled.totalMs / none.totalMs, 2);
    };
    return {
      id: "9",
      title: "Warm pool: a fresh container per call without the cold start",
      target:
        "burst p50 with pool >= concurrency <= 1.2x no cold start; 200-task batch <= 1.5x at 16 and 64; soak: no container reused, all deleted, pool within its ceiling",
      met: bursts.met && batched.met && soaked.met,
      headline: `burst p50 ${round(pooledP50, 0)} ms pooled vs ${round(noColdP50, 0)} ms with no cold start at 16; batch x${batchRatio(16)} at 16${quick ? "" : `, x${batchRatio(64)} at 64`}; soak ${soaked.raw.calls} calls: ${soaked.raw.servedTwice} reused, ${soaked.raw.leftRunning} left`,
      tables: [bursts.table, batched.table, soaked.table],
      notes: [
        "Each call is `POST /exec` with a fresh sandbox id over HTTP to the built Worker bundle in Miniflare, with the Worker's real `TaskContainer` Durable Object, the pool's `WarmPoolShard` Durable Objects and workerd's container client; containers are bubblewrap process trees of the harness's engine (apps/worker/test/harness), started with the Worker's own PID 1, which the engine holds back by the injected cold start.",
        "\"No cold start\" still pays this machine's real container start (a bubblewrap process tree and the harness's Node relay per container), which grows with concurrency: that is why a pooled burst can be faster than it. On Cloudflare the whole start is the cold start the pool hides.",
        "A pooled burst is measured with the pool full (it refills between bursts); in a batch longer than the pool, a call that finds none ready waits for a container the pool is starting (one per waiting call, and a replacement for each ready one lent), within half of MAX_INSTANCES.",
        "warm start = `startMs` of the warm calls in the bridge's log (claiming a container from a shard and checking it is alive, until the command runs); claims per shard come from each shard's own count.",
        "The soak's figures come from the harness engine's records of every container: the requests it received (one command at most), and its create and delete.",
      ],
      raw: { bursts: bursts.raw, batches: batched.raw, soak: soaked.raw },
    };
  } finally {
    await pool?.close();
    await base.close();
  }
}

export const warmPool: BenchItem = {
  id: "warm-pool",
  title: "Warm pool through the Worker, real Durable Objects",
  run,
};
