import { execFileSync } from "node:child_process";
import { newSandboxId } from "@remote-task/protocol";
import { standInImage } from "./images.ts";
import { WorkerHarness } from "./worker.ts";
const h = await WorkerHarness.start({ image: standInImage(), vars: { WARM_POOL_TARGET: "16", MAX_INSTANCES: "200", WARM_POOL_REFILL_BATCH: "8" } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
try {
  await h.health();
  let t = Date.now();
  for (let i = 0; i < 200; i++) { const w = (await h.health()).warmPool; if (w?.ready === 16) break; await sleep(200); }
  console.log("fill 16 ms", Date.now() - t);
  const mem = execFileSync("sh", ["-c", "ps -eo rss,args | grep -E 'container-server|relay.ts' | grep -v grep | awk '{s+=$1} END {print s/1024, NR}'"]).toString();
  console.log("pool RSS MiB, procs", mem.trim());
  for (const c of [16, 64]) {
    t = Date.now();
    const answers = await Promise.all(Array.from({ length: c }, () => h.exec({ sandboxId: newSandboxId("x"), command: "true", timeoutSeconds: 120 })));
    const ms = answers.map((a) => a.ms).sort((a, b) => a - b);
    console.log(`c=${c} wall ${Date.now() - t} p50 ${ms[Math.floor(c / 2)]} max ${ms.at(-1)} statuses ${[...new Set(answers.map((a) => a.status))]}`);
    await sleep(3000);
  }
} finally {
  await h.close();
}
