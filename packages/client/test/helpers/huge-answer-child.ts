// One call in a process of its own, so that only its memory is measured: prints, as one JSON line,
// how much the process's resident memory grew at the peak of the call, and what the call returned.
// `node --expose-gc huge-answer-child.ts <bridge url> <command> <client|naive>` (Node.js runs it
// as TypeScript). `client` runs the built client; `naive` reads the answer whole and parses it at
// once, as a client without a bound would. A small call first loads what is loaded lazily.
import { readFileSync, writeFileSync } from "node:fs";
import { createClient } from "@remote-task/client";
import { request } from "undici";

const [url = "", command = "", mode = "client"] = process.argv.slice(2);

function status(field: string): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(
    readFileSync("/proc/self/status", "utf8"),
  );
  if (match === null) throw new Error(`/proc/self/status has no ${field}`);
  return Number(match[1]) * 1024;
}

interface Outcome {
  exitCode: number;
  stdout: string;
  stdoutBytes: number;
  stdoutTruncated: boolean;
  stderr: string;
}

const client = createClient({ url, timeoutSeconds: 300 });
async function naive(name: string): Promise<Outcome> {
  const response = await request(`${url}/exec`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sandboxId: "mikan-task-naive", command: name }),
  });
  const value = (await response.body.json()) as { stdout: string; stderr: string; code: number };
  return {
    exitCode: value.code,
    stdout: value.stdout,
    stdoutBytes: Buffer.byteLength(value.stdout),
    stdoutTruncated: false,
    stderr: value.stderr,
  };
}
const run = (name: string): Promise<Outcome> => (mode === "naive" ? naive(name) : client.run(name));

await run("small");
(globalThis as { gc?: () => void }).gc?.();

// The peak is the high-water mark after resetting it (Linux: clear_refs 5), and a sample every
// few milliseconds in case the reset is refused.
let hwmUsable = true;
try {
  writeFileSync("/proc/self/clear_refs", "5");
} catch {
  hwmUsable = false;
}
const baseline = status("VmRSS");
let sampled = baseline;
const timer = setInterval(() => {
  sampled = Math.max(sampled, status("VmRSS"));
}, 5);
const result = await run(command);
clearInterval(timer);
const peak = Math.max(sampled, status("VmRSS"), hwmUsable ? status("VmHWM") : 0);
await client.close();
process.stdout.write(
  `${JSON.stringify({
    growth: peak - baseline,
    exitCode: result.exitCode,
    stdoutBytes: result.stdoutBytes,
    stdoutTruncated: result.stdoutTruncated,
    stdoutKeptBytes: Buffer.byteLength(result.stdout),
    stdoutEnd: result.stdout.slice(-200),
    stderr: result.stderr,
  })}\n`,
);
