// 17. Start to first output through the Worker on real containers: `echo hi` sent to the built
// Worker in Miniflare, whose `TaskContainer` Durable Object starts a Podman container through
// workerd's container client and the harness's shim (apps/worker/test/harness/podman-shim.ts) and
// runs the command with `exec`, against a bare `podman run --rm` of the same image with the same
// limits and network none; p50 one at a time and 16 at a time.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { newSandboxId } from "@remote-task/protocol";
import { ensurePodman, type PodmanEngine } from "../../../apps/worker/test/harness/podman-shim.ts";
import { TOKEN, WorkerHarness } from "../../../apps/worker/test/harness/worker.ts";
import type { BenchItem, BenchOptions, ItemResult, Table } from "../lib/report.ts";
import { round, type Summary, summarize } from "../lib/stats.ts";

const COMMAND = "echo hi";
const CONCURRENCIES = [1, 16];
const P50_TARGET = 1.5;

/** ms from sending `echo hi` to the Worker to its first stdout event (then read to the end). */
async function viaWorker(url: URL): Promise<number> {
  const started = performance.now();
  const response = await fetch(new URL("/exec", url), {
    method: "POST",
    headers: {
      authorization: `Bearer ${TOKEN}`,
      "content-type": "application/json",
      accept: "text/event-stream",
    },
    body: JSON.stringify({
      sandboxId: newSandboxId("bench"),
      command: COMMAND,
      timeoutSeconds: 60,
    }),
  });
  if (response.status !== 200 || response.body === null) {
    throw new Error(`the Worker answered ${response.status}: ${await response.text()}`);
  }
  const decoder = new TextDecoder();
  let text = "";
  let first: number | undefined;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (first === undefined && text.includes('"type":"stdout"')) first = performance.now();
  }
  if (first === undefined || !text.includes('"code":0')) {
    throw new Error(`no output or a failure from the Worker: ${text.slice(0, 500)}`);
  }
  return first - started;
}

/** The engine's own hard limits, which the shim gives every container (see podman-shim.ts). */
function engineLimits(engine: PodmanEngine): { nproc: number; nofile: number } {
  const pid = readFileSync(join(engine.dir, "service.pid"), "utf8").trim();
  const limits = readFileSync(`/proc/${pid}/limits`, "utf8").split("\n");
  const hard = (label: string) =>
    Number(limits.find((l) => l.startsWith(label))?.split(/\s{2,}/)[2]);
  return { nproc: hard("Max processes"), nofile: hard("Max open files") };
}

/** ms from spawning `podman run --rm` to the command's first output (then to its exit). */
function bare(engine: PodmanEngine, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let first: number | undefined;
    let out = "";
    const child = spawn("podman", args, {
      env: { ...process.env, CONTAINERS_CONF: join(engine.dir, "containers.conf") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.on("data", (chunk: Buffer) => {
      first ??= performance.now();
      out += chunk.toString("utf8");
    });
    let err = "";
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString("utf8");
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0 || out !== "hi\n" || first === undefined) {
        reject(new Error(`podman run: exit ${code}, ${JSON.stringify(out)} ${err}`));
      } else resolve(first - started);
    });
  });
}

/** `calls` runs of `step`, `concurrency` at a time; each run's ms. */
async function wave(step: () => Promise<number>, calls: number, concurrency: number) {
  const times: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < calls) {
        next++;
        times.push(await step());
      }
    }),
  );
  return times;
}

interface Measured {
  concurrency: number;
  worker: Summary;
  bare: Summary;
}

async function measure(options: BenchOptions) {
  const engine = ensurePodman();
  const limits = engineLimits(engine);
  const args = [
    "--root",
    join(engine.dir, "root"),
    "--runroot",
    join(engine.dir, "run"),
    "run",
    "--rm",
    "--network",
    "none",
    "--ulimit",
    `nproc=${limits.nproc}:${limits.nproc}`,
    "--ulimit",
    `nofile=${limits.nofile}:${limits.nofile}`,
    "--log-driver",
    "none",
    engine.image,
    "/bin/bash",
    "-c",
    COMMAND,
  ];
  const harness = await WorkerHarness.startOnPodman();
  const url = harness.url;
  const rounds = options.quick ? 1 : 3;
  const perRound = (concurrency: number) =>
    concurrency === 1 ? (options.quick ? 4 : 8) : options.quick ? 16 : 32;
  try {
    // Warm-up: the Worker, the Durable Object classes, the engine's first containers.
    await wave(() => viaWorker(url), 4, 2);
    await wave(() => bare(engine, args), 4, 2);
    const series = new Map(
      CONCURRENCIES.map((c) => [c, { worker: [] as number[], bare: [] as number[] }]),
    );
    // Interleaved round by round (the order swapped every other round), so drift on a shared
    // machine hits both alike.
    for (let r = 0; r < rounds; r++) {
      for (const concurrency of CONCURRENCIES) {
        const target = series.get(concurrency) as { worker: number[]; bare: number[] };
        const calls = perRound(concurrency);
        const sides = [
          async () => target.worker.push(...(await wave(() => viaWorker(url), calls, concurrency))),
          async () =>
            target.bare.push(...(await wave(() => bare(engine, args), calls, concurrency))),
        ];
        if (r % 2 === 1) sides.reverse();
        for (const side of sides) await side();
      }
    }
    if (harness.engine.problems.length > 0) {
      throw new Error(`shim problems: ${harness.engine.problems.join("; ")}`);
    }
    const measured: Measured[] = CONCURRENCIES.map((concurrency) => {
      const target = series.get(concurrency) as { worker: number[]; bare: number[] };
      return { concurrency, worker: summarize(target.worker), bare: summarize(target.bare) };
    });
    return { measured, limits, containers: harness.engine.containers.length };
  } finally {
    await harness.close();
  }
}

async function runItem(options: BenchOptions): Promise<ItemResult> {
  const m = await measure(options);
  const ms = (v: number) => round(v, 0);
  const rows: Table["rows"] = m.measured.flatMap(({ concurrency, worker, bare }) => [
    [
      concurrency,
      "the Worker (Miniflare, TaskContainer, Podman through the shim)",
      worker.runs,
      ms(worker.p50),
      ms(worker.p99),
      round(worker.p50 / bare.p50, 2),
      `<= ${P50_TARGET}`,
    ],
    [
      concurrency,
      "bare podman run --rm, same image and limits",
      bare.runs,
      ms(bare.p50),
      ms(bare.p99),
      1,
      "",
    ],
  ]);
  const ratios = m.measured.map((x) => x.worker.p50 / x.bare.p50);
  return {
    id: "17",
    title: "Worker on real containers: start to first output",
    target: `p50 <= ${P50_TARGET}x a bare podman run --rm, one at a time and 16 at a time`,
    met: ratios.every((r) => r <= P50_TARGET),
    headline: m.measured
      .map((x) => `${x.concurrency} at a time: p50 ${round(x.worker.p50 / x.bare.p50, 2)}x bare`)
      .join(", "),
    tables: [
      {
        caption: `Start to first output of \`${COMMAND}\` (ms)`,
        columns: ["at a time", "series", "calls", "p50", "p99", "p50 / bare", "target"],
        rows,
      },
    ],
    notes: [
      "Worker: the bundle `npm run build -w apps/worker` writes, in Miniflare, each call a new `TaskContainer` Durable Object (warm pool off) whose container workerd's client creates through the Podman shim of apps/worker/test/harness (egress sidecar emulated; the engine of scripts/docker-engine.mjs, runc); timed from sending `POST /exec` (SSE) to the first `stdout` event. Internet off: the container's network is `none`.",
      `Bare: \`podman run --rm --network none\` of the same image (${m.limits.nproc} processes and ${m.limits.nofile} open files as rlimits, as the shim sets), timed from spawning the CLI to its first output. Both sides interleaved round by round, after warm-up; ${m.containers} Worker containers in all.`,
    ],
    raw: m,
  };
}

export const workerPodman: BenchItem = {
  id: "worker-podman",
  title: "Worker on real containers",
  run: runItem,
};
