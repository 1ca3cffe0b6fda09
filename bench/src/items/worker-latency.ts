// 8. Per-call latency through the Worker with the real container plumbing (the harness of
// apps/worker: Miniflare, the Worker's TaskContainer Durable Object, workerd's container client,
// bwrap containers of the harness's engine), with an injected cold start of 0 and 2000 ms, at
// concurrency 1 and 16. The input for a warm pool of never-reused containers: how much of a
// call is the container's start, and what each container's lifecycle costs.
import { newSandboxId } from "@remote-task/protocol";
import type { ContainerRecord } from "../../../apps/worker/test/harness/engine.ts";
import { standInImage } from "../../../apps/worker/test/harness/images.ts";
import { WorkerHarness } from "../../../apps/worker/test/harness/worker.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const COLD_STARTS_MS = [0, 2000];
const CONCURRENCIES = [1, 16];

interface Case {
  coldStartMs: number;
  concurrency: number;
  latencyMs: number[];
  sandboxIds: string[];
  containers: ContainerRecord[];
}

async function wave(harness: WorkerHarness, target: Case, calls: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < calls) {
      next++;
      const sandboxId = newSandboxId("bench");
      target.sandboxIds.push(sandboxId);
      const answer = await harness.exec({ sandboxId, command: "echo ok", timeoutSeconds: 60 });
      if (answer.status !== 200 || !answer.text.includes('"code":0')) {
        throw new Error(`the Worker answered ${answer.status}: ${answer.text.slice(0, 300)}`);
      }
      target.latencyMs.push(answer.ms);
    }
  };
  await Promise.all(Array.from({ length: target.concurrency }, worker));
}

/** ms between two lifecycle events of a container, when both happened. */
function between(record: ContainerRecord, from: string, to: string): number | undefined {
  const a = record.events.find((e) => e.event === from)?.at;
  const b = record.events.find((e) => e.event === to)?.at;
  return a === undefined || b === undefined ? undefined : b - a;
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const rounds = options.quick ? 1 : 3;
  const harness = await WorkerHarness.start({ image: standInImage() });
  const cases: Case[] = COLD_STARTS_MS.flatMap((coldStartMs) =>
    CONCURRENCIES.map((concurrency) => ({
      coldStartMs,
      concurrency,
      latencyMs: [],
      sandboxIds: [],
      containers: [],
    })),
  );
  try {
    // Warm-up: the Durable Object class, the Worker and the first container start.
    const warmUp = {
      coldStartMs: 0,
      concurrency: 4,
      latencyMs: [],
      sandboxIds: [],
      containers: [],
    };
    await wave(harness, warmUp, 4);
    // Cases interleaved round by round, so drift on a shared machine hits them alike.
    for (let round = 0; round < rounds; round++) {
      for (const target of cases) {
        harness.engine.faults = { coldStartMs: target.coldStartMs };
        await wave(harness, target, target.concurrency === 1 ? 4 : 16);
      }
    }
    harness.engine.faults = {};
    // Containers are destroyed after each answer (waitUntil): wait for the last deletes.
    const deadline = Date.now() + 30_000;
    while (harness.engine.live.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    for (const target of cases) {
      for (const id of target.sandboxIds)
        target.containers.push(...(await harness.containersOf(id)));
    }
    if (harness.engine.problems.length > 0) {
      throw new Error(`the harness saw unknown requests: ${harness.engine.problems.join("; ")}`);
    }
  } finally {
    await harness.close();
  }

  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  const warmP50 = new Map<number, number>();
  for (const target of cases) {
    const latency = summarize(target.latencyMs);
    if (target.coldStartMs === 0) warmP50.set(target.concurrency, latency.p50);
    const known = target.containers;
    const startMs = summarize(
      known.map((r) => between(r, "create", "running")).filter((v) => v !== undefined),
    );
    const lifeMs = summarize(
      known.map((r) => between(r, "create", "delete")).filter((v) => v !== undefined),
    );
    const base = warmP50.get(target.concurrency) ?? Number.NaN;
    rows.push([
      target.coldStartMs,
      target.concurrency,
      latency.runs,
      round(latency.p50, 0),
      round(latency.p99, 0),
      target.coldStartMs === 0 ? "1" : `${round(latency.p50 / base, 2)}`,
      round(startMs.p50, 0),
      round(lifeMs.p50, 0),
      known.length,
    ]);
    raw.push({
      coldStartMs: target.coldStartMs,
      concurrency: target.concurrency,
      latencyMs: target.latencyMs,
      latency,
      containerStartMs: startMs,
      containerLifeMs: lifeMs,
      lifecycles: known.map((r) => ({ durableObjectId: r.durableObjectId, events: r.events })),
    });
  }
  const cold1 = rows.find((r) => r[0] === 2000 && r[1] === 1);
  const warm1 = rows.find((r) => r[0] === 0 && r[1] === 1);
  return {
    id: "8",
    title: "Worker call latency with the real Durable Object, cold start 0 vs 2000 ms",
    target: "none: the input for a warm pool (how much of a call is the container's cold start)",
    met: null,
    headline: `p50 ${warm1?.[3]} ms with no cold start, ${cold1?.[3]} ms with 2 s (x${cold1?.[5]}) at concurrency 1`,
    tables: [
      {
        columns: [
          "cold start ms",
          "concurrency",
          "calls",
          "p50 ms",
          "p99 ms",
          "p50 / p50 at 0 ms",
          "container create -> running p50 ms",
          "container create -> delete p50 ms",
          "containers",
        ],
        rows,
      },
    ],
    notes: [
      "Each call is `POST /exec` `echo ok` with a fresh sandbox id over HTTP to the built Worker bundle in Miniflare, with the Worker's real `TaskContainer` Durable Object and workerd's container client; containers are bubblewrap process trees of the harness's engine (apps/worker/test/harness), started with the Worker's own PID 1, which the engine delays by the injected cold start.",
      "Latency is client-side, from the request to the end of the answer; the container is destroyed after the answer (in `waitUntil`), so create -> delete is the container's whole life for one call.",
      "Concurrency 16 starts 16 containers at once (each a bubblewrap process tree with the harness's Node relay) on this 2-core machine, so those rows measure this machine's process start-up as much as the Worker; on Cloudflare each container has its own CPU.",
    ],
    raw,
  };
}

export const workerLatency: BenchItem = {
  id: "worker-latency",
  title: "Worker call latency, real Durable Object",
  run,
};
