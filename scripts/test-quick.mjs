// `npm run test:quick`: the unit and contract tests of every package, for the edit-test loop
// (about a minute on 2 cores). It leaves out what starts real sandboxes, containers or bridges
// at scale and what loads built files; `npm test` runs everything. Ends with the totals line.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { countResults } from "./vitest-results.mjs";
import { root } from "./workspaces.mjs";

/** Each package's quick run: its directory, vitest arguments, and the files left to `npm test`. */
const RUNS = [
  { dir: "packages/protocol" },
  { dir: "packages/internal" },
  {
    dir: "packages/client",
    // A real local bridge per test, capacity waits, gigabyte answers; 100 durable calls cut by
    // a proxy (local and docker backends) and a client process in the built client.
    slow: [
      "test/integration.bridge.test.ts",
      "test/capacity.test.ts",
      "test/huge-answer.test.ts",
      "test/durable.bridge.test.ts",
      "test/durable.docker.test.ts",
    ],
  },
  {
    dir: "packages/tool",
    // These load the built entry points.
    slow: ["test/mcp.test.ts", "test/entry-points.test.ts"],
  },
  {
    dir: "packages/bridge",
    // Real bubblewrap sandboxes attacked one by one, Podman containers, the conformance suite
    // against real processes, a memory soak.
    slow: [
      "test/local-boundary.test.ts",
      "test/docker-*.test.ts",
      "test/conformance.test.ts",
      "test/memory.test.ts",
    ],
  },
  // The Worker's unit tests inside workerd; its harness project starts containers.
  { dir: "apps/worker", args: ["--project", "workerd"] },
];
const PARALLEL = 2;

const outDir = mkdtempSync(join(tmpdir(), "remote-task-quick-"));

function runOne({ dir, args = [], slow = [] }, index) {
  const outputFile = join(outDir, `${index}.json`);
  const argv = ["vitest", "run", ...args, `--outputFile.json=${outputFile}`];
  for (const glob of slow) argv.push("--exclude", glob);
  return new Promise((resolve) => {
    const child = spawn("npx", argv, { cwd: join(root, dir), stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    child.stdout.on("data", (chunk) => {
      log += chunk;
    });
    child.stderr.on("data", (chunk) => {
      log += chunk;
    });
    child.on("close", (code) => resolve({ dir, code, log, outputFile }));
  });
}

const pending = RUNS.map((run, index) => () => runOne(run, index));
const results = [];
async function worker() {
  for (let next = pending.shift(); next; next = pending.shift()) {
    const result = await next();
    results.push(result);
    process.stdout.write(
      result.code === 0 ? `${result.dir}: ok\n` : `${result.dir}: FAILED\n${result.log}\n`,
    );
  }
}
await Promise.all(Array.from({ length: PARALLEL }, worker));

let passed = 0;
let failed = 0;
let skipped = 0;
for (const { dir, outputFile, code } of results) {
  let r;
  try {
    r = JSON.parse(readFileSync(outputFile, "utf8"));
  } catch {
    failed += 1;
    console.log(`${dir}: no test results (exit ${code})`);
    continue;
  }
  const counts = countResults(r);
  // A run that failed with every test passed (an unhandled error) is still a failure.
  if (code !== 0 && counts.failed === 0) counts.failed = 1;
  passed += counts.passed;
  failed += counts.failed;
  skipped += counts.skipped;
}
rmSync(outDir, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
