// 2. runMany of 1000 tasks on a backend with 50 ms latency vs the ideal tasks x latency / concurrency.
import { createClient } from "@remote-task/client";
import { startBridgeProcess } from "../lib/bridges.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const TARGET = 1.25;
const LATENCY_MS = 50;
/** The client's default `maxConnections` (packages/client/src/types.ts). */
const CLIENT_DEFAULT_CONNECTIONS = 128;

interface Case {
  concurrency: number;
  maxConnections?: number;
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const tasks = options.quick ? 200 : 1000;
  const repeats = options.quick ? 1 : 3;
  const cases: Case[] = [
    { concurrency: 16 },
    { concurrency: 64 },
    { concurrency: 256 },
    { concurrency: 256, maxConnections: 256 },
  ];
  // The fake backend interprets `sleep 0.05` as 50 ms before the exit; nothing else runs.
  const command = `sleep ${LATENCY_MS / 1000}`;
  const bridge = await startBridgeProcess({ backend: "fake" });
  const rows: Table["rows"] = [];
  const raw: unknown[] = [];
  let ratioAt64 = Number.NaN;
  try {
    const clients = new Map<number, ReturnType<typeof createClient>>();
    const clientFor = (connections: number) => {
      let client = clients.get(connections);
      if (client === undefined) {
        client = createClient({
          url: bridge.url,
          token: bridge.token,
          ...(connections === CLIENT_DEFAULT_CONNECTIONS ? {} : { maxConnections: connections }),
        });
        clients.set(connections, client);
      }
      return client;
    };
    // Warm-up: open the connections each client will use.
    for (const c of cases) {
      const client = clientFor(c.maxConnections ?? CLIENT_DEFAULT_CONNECTIONS);
      await client.runMany(Array(c.concurrency * 2).fill(command), { concurrency: c.concurrency });
    }
    const totals = new Map<Case, number[]>(cases.map((c) => [c, []]));
    // Rounds: every case once per round, so drift spreads over all of them.
    for (let r = 0; r < repeats; r++) {
      for (const c of cases) {
        const client = clientFor(c.maxConnections ?? CLIENT_DEFAULT_CONNECTIONS);
        const started = performance.now();
        const settled = await client.runMany(Array(tasks).fill(command), {
          concurrency: c.concurrency,
        });
        const elapsed = performance.now() - started;
        const failed = settled.filter((s) => s.status === "rejected" || s.value.exitCode !== 0);
        if (failed.length > 0) throw new Error(`${failed.length} tasks failed at ${c.concurrency}`);
        totals.get(c)?.push(elapsed);
      }
    }
    for (const c of cases) {
      const connections = c.maxConnections ?? CLIENT_DEFAULT_CONNECTIONS;
      const s = summarize(totals.get(c) ?? []);
      const ideal = (tasks * LATENCY_MS) / c.concurrency;
      const effective = Math.min(c.concurrency, connections);
      const idealAtPool = (tasks * LATENCY_MS) / effective;
      const ratio = s.p50 / ideal;
      if (c.concurrency === 64) ratioAt64 = ratio;
      rows.push([
        c.concurrency,
        connections,
        s.runs,
        round(ideal, 0),
        round(s.p50, 0),
        round(s.max, 0),
        round(ratio, 3),
        round(s.p50 / idealAtPool, 3),
        round((tasks / s.p50) * 1000, 0),
      ]);
      raw.push({
        ...c,
        maxConnections: connections,
        tasks,
        idealMs: ideal,
        idealAtPoolMs: idealAtPool,
        totalMs: s,
        ratio,
      });
    }
  } finally {
    await bridge.stop();
  }
  return {
    id: "2",
    title: "Fan-out: `runMany` vs ideal",
    target: `total <= ${TARGET} x ideal at concurrency 64`,
    met: ratioAt64 <= TARGET,
    headline: `${round(ratioAt64, 2)} x ideal at concurrency 64 (${tasks} tasks x ${LATENCY_MS} ms)`,
    tables: [
      {
        columns: [
          "concurrency",
          "client connections",
          "runs",
          "ideal ms",
          "p50 total ms",
          "max total ms",
          "p50 / ideal",
          "p50 / ideal at min(concurrency, connections)",
          "tasks/s",
        ],
        rows,
      },
    ],
    notes: [
      `${tasks} tasks per batch; each task is \`${command}\` on the fake backend (50 ms before exit, nothing runs), bridge in its own process; ideal = tasks x ${LATENCY_MS} ms / concurrency.`,
      `The client's own Agent opens at most \`maxConnections\` = ${CLIENT_DEFAULT_CONNECTIONS} connections per origin by default, so concurrency 256 runs at most 128 requests at once; the last row raises \`maxConnections\` to 256.`,
      `Each batch was run ${repeats} times, the cases interleaved round by round, after a warm-up batch per case.`,
    ],
    raw,
  };
}

export const fanout: BenchItem = { id: "fanout", title: "Fan-out", run };
