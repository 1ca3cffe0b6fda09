// Peak RSS growth of the bridge process while a command prints N bytes through it.
// Usage (after `npm run build -w @remote-task/bridge`):
//   node packages/bridge/scripts/measure-memory.mjs [bytes=200000000] [json|sse] [auto|bwrap|none]
import { createLocalBackend } from "../dist/local.js";
import { startEmbeddedBridge } from "../dist/node.js";

const bytes = Number(process.argv[2] ?? 200_000_000);
const mode = process.argv[3] ?? "json";
const isolation = process.argv[4] ?? "auto";
const bridge = await startEmbeddedBridge({
  backend: createLocalBackend({ isolation }),
  logger: () => {},
});
const headers = { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" };
if (mode === "sse") headers.accept = "text/event-stream";

// Warm up once so code loading is not counted as growth.
await (
  await fetch(`${bridge.url}/exec`, {
    method: "POST",
    headers,
    body: JSON.stringify({
      sandboxId: "warm-up",
      command: "head -c 3000000 /dev/zero | tr '\\0' a",
    }),
  })
).text();
globalThis.gc?.();
const baseline = process.memoryUsage().rss;
let peak = baseline;
const sampler = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
}, 5);

const started = performance.now();
const response = await fetch(`${bridge.url}/exec`, {
  method: "POST",
  headers,
  body: JSON.stringify({
    sandboxId: "measure",
    command: `head -c ${bytes} /dev/zero | tr '\\0' a`,
    timeoutSeconds: 600,
  }),
});
const text = await response.text();
const seconds = (performance.now() - started) / 1000;
clearInterval(sampler);
peak = Math.max(peak, process.memoryUsage().rss);
const result =
  mode === "sse" ? JSON.parse(text.trim().split("\n").at(-1).slice(6)).result : JSON.parse(text);
await bridge.close();

const mib = (n) => `${(n / 1_048_576).toFixed(1)} MiB`;
console.log(
  JSON.stringify({
    mode,
    isolation: bridge.backend.isolation,
    bytes,
    stdoutBytes: result.stdoutBytes,
    retainedBytes: result.stdout.length,
    seconds: Number(seconds.toFixed(2)),
    throughputMiBps: Number((bytes / 1_048_576 / seconds).toFixed(0)),
    baselineRss: mib(baseline),
    peakRss: mib(peak),
    peakGrowth: mib(peak - baseline),
  }),
);
