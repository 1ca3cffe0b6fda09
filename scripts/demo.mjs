// The main job, end to end on the embedded local bridge: fan-out through the client with
// progress, a large output tail-truncated with the notice, a timeout, and one call through the
// `remote_task` tool. Exits non-zero if anything does not behave as described.
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createClient, formatOutput } from "@remote-task/client";
import { createRemoteTaskTool } from "@remote-task/tool";

const started = Date.now();
const problems = [];
const check = (ok, what) => {
  if (!ok) problems.push(what);
};
const line = (text = "") => process.stdout.write(`${text}\n`);
const seconds = (ms) => `${(ms / 1000).toFixed(2)}s`;

// Per-call log lines would drown the report; problems still reach stderr.
const bridge = await startEmbeddedBridge({
  logger: (entry) => entry.level === "error" && console.error(JSON.stringify(entry)),
});
const client = createClient({ url: bridge.url, token: bridge.token });
try {
  const health = await client.health();
  line(`remote-task demo: embedded local bridge at ${bridge.url}`);
  line(`  backend ${health.backend}, isolation ${health.isolation}, protocol ${health.protocol}`);

  // 1. Fan-out: eight tasks, each in its own fresh sandbox, eight at a time.
  line();
  line("1. Fan-out: 8 tasks in parallel, each in a fresh sandbox");
  const tasks = Array.from({ length: 8 }, (_, i) => ({
    command: `echo task-${i} > mine.txt; sleep 0.$((8 - ${i})); echo "task ${i}: $(ls | tr '\\n' ' ')sees $(cat mine.txt), n*n=$((${i} * ${i}))"`,
    timeoutSeconds: 30,
  }));
  const results = await client.runMany(tasks, {
    concurrency: 8,
    onProgress: ({ done, failed, total }) => {
      if (process.stdout.isTTY)
        process.stdout.write(`\r   progress: ${done}/${total} done, ${failed} failed`);
    },
  });
  line(
    `${process.stdout.isTTY ? "\r" : ""}   progress: ${results.length}/${results.length} done, in input order (later tasks slept less and finished first)`,
  );
  const ids = new Set();
  for (const settled of results) {
    if (settled.status === "rejected") {
      check(false, `task ${settled.index} failed: ${settled.reason.message}`);
      continue;
    }
    const r = settled.value;
    ids.add(r.sandboxId);
    line(`   ${r.stdout.trim()}  (${seconds(r.durationMs)}, ${r.sandboxId.slice(0, 19)}…)`);
    check(
      r.stdout.includes(`sees task-${settled.index}`),
      `task ${settled.index} saw another sandbox`,
    );
    check(r.stdout.includes("mine.txt sees"), `task ${settled.index} saw files it did not write`);
  }
  check(ids.size === tasks.length, "sandbox ids were not distinct");

  // 2. Large output: the bridge keeps a bounded tail, the agent view keeps the last 50 KiB.
  line();
  line("2. Large output: seq 1 3000000 (21.8 MB)");
  const big = await client.run("seq 1 3000000", { timeoutSeconds: 60 });
  const view = formatOutput(big);
  line(
    `   printed ${big.stdoutBytes} bytes; the bridge kept ${big.stdout.length} bytes (truncated: ${big.stdoutTruncated})`,
  );
  line(`   agent view ends with:`);
  for (const l of view.text.split("\n").slice(-4)) line(`     ${l}`);
  check(big.stdoutBytes === 22_888_896, `expected 22888896 bytes, got ${big.stdoutBytes}`);
  check(view.truncated && view.text.includes("Have the command summarise"), "no truncation notice");
  const notice =
    "[Showing the last 15.6KB of 21.8MB (2000-line limit). Have the command summarise or filter its own output.]";
  check(
    view.text.startsWith("2998002\n") && view.text.endsWith(`3000000\n\n\n${notice}`),
    "wrong tail (the last 2000 lines) or notice",
  );

  // 3. Timeout: enforced by the bridge, reported as a timeout, the command killed.
  line();
  line("3. Timeout: sleep 30 with a 1 second timeout");
  const slow = await client.run("echo started; sleep 30", { timeoutSeconds: 1 });
  line(
    `   outcome ${slow.outcome}, code ${slow.exitCode}, after ${seconds(slow.durationMs)}, output: ${JSON.stringify(slow.stdout)}`,
  );
  check(slow.outcome === "timeout" && slow.exitCode === 124, "timeout not reported as such");
  check(slow.durationMs < 10_000, "timeout took too long");

  // 4. The remote_task tool, as an agent calls it.
  line();
  line('4. The remote_task tool: {"command": "uname -s; echo to-stderr >&2; exit 3"}');
  const tool = createRemoteTaskTool({ client });
  const toolResult = await tool.execute({ command: "uname -s; echo to-stderr >&2; exit 3" });
  for (const l of toolResult.text.split("\n")) line(`   | ${l}`);
  line(`   isError: ${toolResult.isError}`);
  check(toolResult.isError, "non-zero exit was not an error result");
  check(
    toolResult.text === "Linux\n\nto-stderr\n\n\nCommand exited with code 3",
    "tool text differs",
  );

  const stats = bridge.backend.stats();
  line();
  line(`Sandboxes: ${stats.started} started, ${stats.destroyed} destroyed, ${stats.live} live.`);
  check(stats.live === 0 && stats.started === stats.destroyed, "a sandbox was left behind");
} finally {
  await client.close();
  await bridge.close();
}

line();
if (problems.length > 0) {
  for (const p of problems) line(`FAILED: ${p}`);
  process.exitCode = 1;
} else {
  line(
    `All good: every task ran in its own sandbox and was cleaned up (${seconds(Date.now() - started)}).`,
  );
}
