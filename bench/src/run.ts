// `npm run bench [-- --only overhead,fanout] [-- --quick]`: runs the benchmarks, writes
// bench/results.md and bench/results.json (only for a full, non-quick run of every item unless
// --write is given; a partial run with --write replaces only the items it ran).
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { bigOutputBridge } from "./items/big-output-bridge.ts";
import { bigOutputClient } from "./items/big-output-client.ts";
import { burstItem } from "./items/burst.ts";
import { coldStart } from "./items/cold-start.ts";
import { docker } from "./items/docker.ts";
import { fanout } from "./items/fanout.ts";
import { overhead } from "./items/overhead.ts";
import { requestPath } from "./items/request-path.ts";
import { sandbox } from "./items/sandbox.ts";
import { secretProxy } from "./items/secret-proxy.ts";
import { spillOver } from "./items/spill-over.ts";
import { truncation } from "./items/truncation.ts";
import { warmPool } from "./items/warm-pool.ts";
import { workerOutput } from "./items/worker.ts";
import { hedgedStartItem, poolBatchItem } from "./items/worker-cold-starts.ts";
import { workerLatency } from "./items/worker-latency.ts";
import { workerPodman } from "./items/worker-podman.ts";
import {
  type BenchItem,
  type ItemResult,
  markdownTable,
  summaryTable,
  verdict,
} from "./lib/report.ts";
import { round } from "./lib/stats.ts";

const ITEMS: BenchItem[] = [
  overhead,
  requestPath,
  fanout,
  bigOutputBridge,
  bigOutputClient,
  truncation,
  workerOutput,
  coldStart,
  workerLatency,
  warmPool,
  poolBatchItem,
  hedgedStartItem,
  sandbox,
  secretProxy,
  burstItem,
  spillOver,
  docker,
  workerPodman,
];

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    quick: { type: "boolean", default: false },
    write: { type: "boolean" },
    help: { type: "boolean", default: false },
  },
});

if (values.help) {
  console.log(
    `Usage: npm run bench -- [--only ${ITEMS.map((i) => i.id).join(",")}] [--quick] [--write]\n` +
      "--quick: fewer runs and smaller sizes (a smoke run). Results files are written after a full\n" +
      "run of every item, or always with --write.",
  );
  process.exit(0);
}

const wanted = values.only?.split(",").map((s) => s.trim()) ?? ITEMS.map((i) => i.id);
const unknown = wanted.filter((id) => !ITEMS.some((i) => i.id === id));
if (unknown.length > 0) {
  console.error(
    `Unknown benchmark(s): ${unknown.join(", ")}. Known: ${ITEMS.map((i) => i.id).join(", ")}.`,
  );
  process.exit(2);
}
const selected = ITEMS.filter((i) => wanted.includes(i.id));

function machine() {
  const kernel = execFileSync("uname", ["-sr"], { encoding: "utf8" }).trim();
  return {
    nproc: Number(execFileSync("nproc", { encoding: "utf8" }).trim()),
    cpu: cpus()[0]?.model ?? "unknown",
    memoryGiB: round(totalmem() / 1024 ** 3, 1),
    node: process.version,
    kernel,
  };
}

function commit(): string {
  try {
    const sha = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync(
      "git",
      ["status", "--porcelain", "--", ":/packages", ":/apps", ":/bench"],
      {
        encoding: "utf8",
      },
    );
    return dirty.trim() === "" ? sha : `${sha} (with uncommitted changes)`;
  } catch {
    return "unknown";
  }
}

const started = Date.now();
const measuredAt = new Date(started).toISOString();
const measuredCommit = commit();
const results: ItemResult[] = [];
const load = () => round(loadavg()[0] ?? 0, 1);
for (const item of selected) {
  console.log(`\n== ${item.id}: ${item.title}${values.quick ? " (quick)" : ""}`);
  const t0 = performance.now();
  const loadBefore = load();
  const result = await item.run({ quick: values.quick });
  result.seconds = round((performance.now() - t0) / 1000, 1);
  result.loadAverage = [loadBefore, load()];
  result.item = item.id;
  result.measuredAt = measuredAt;
  result.commit = measuredCommit;
  results.push(result);
  for (const table of result.tables) console.log(`${markdownTable(table)}\n`);
  for (const note of result.notes) console.log(`- ${note}`);
  console.log(`-> ${result.headline} [${verdict(result.met)}] (${result.seconds} s)`);
}

const info = machine();
const totalSeconds = round((Date.now() - started) / 1000, 1);
const dir = fileURLToPath(new URL("../", import.meta.url));

/**
 * What the results files hold after this run: a full run replaces them; a partial one replaces
 * the items it ran and keeps the others as they were measured (each says when, and at which commit).
 */
function mergedResults(): ItemResult[] {
  const complete = selected.length === ITEMS.length;
  if (complete || !existsSync(`${dir}results.json`)) return results;
  const previous = JSON.parse(readFileSync(`${dir}results.json`, "utf8")) as {
    results: ItemResult[];
  };
  return ITEMS.flatMap((item) => {
    const found =
      results.find((r) => r.item === item.id) ?? previous.results.find((r) => r.item === item.id);
    return found === undefined ? [] : [found];
  });
}

const header = (all: readonly ItemResult[]) => [
  "# Benchmark results",
  "",
  `Generated by \`npm run bench\`${values.quick ? " -- --quick" : ""}; each item says when and at which commit it was measured.`,
  `Machine: ${info.nproc} CPUs (${info.cpu}), ${info.memoryGiB} GiB memory, Node ${info.node}, ${info.kernel}.`,
  "Every ratio compares two things measured side by side in one run of its item; timings on a shared",
  "2-core machine are noisy, so read the ratios, not the absolute milliseconds. The 1-minute load",
  "average before and after each item is given with it: other work on the machine slows the side",
  "that needs more CPU more, so ratios move with the load.",
  "",
  markdownTable(summaryTable(all)),
  "",
];
const sections = (all: readonly ItemResult[]) =>
  all.flatMap((r) => [
    `## ${r.id}. ${r.title}`,
    "",
    `Target: ${r.target}. Verdict: **${verdict(r.met)}**. (Measured ${r.measuredAt ?? "at an unrecorded time"}${r.commit ? ` at ${r.commit}` : ""} in ${r.seconds} s; 1-minute load average ${r.loadAverage?.join(" -> ")})`,
    "",
    ...r.tables.flatMap((t) => [markdownTable(t), ""]),
    ...r.notes.map((n) => `- ${n}`),
    "",
  ]);
const complete = selected.length === ITEMS.length && !values.quick;
if (values.write ?? complete) {
  const all = mergedResults();
  writeFileSync(`${dir}results.md`, `${[...header(all), ...sections(all)].join("\n").trimEnd()}\n`);
  writeFileSync(
    `${dir}results.json`,
    `${JSON.stringify({ generatedAt: measuredAt, totalSeconds, quick: values.quick, machine: info, results: all }, null, 2)}\n`,
  );
  console.log(`\nWrote bench/results.md and bench/results.json (${totalSeconds} s).`);
} else {
  console.log(
    `\nDone in ${totalSeconds} s (results files not written: partial or quick run; add --write).`,
  );
}
