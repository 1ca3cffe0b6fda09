// The baseline for big outputs: a bare child_process.spawn whose stdout is read in Node and
// discarded, in its own process like the bridge.
import { spawn } from "node:child_process";
import { gcClock, serveRpc } from "../lib/proc.ts";

function runDiscarding(params: { command: string }): Promise<{ ms: number; bytes: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", params.command], { stdio: ["ignore", "pipe", "ignore"] });
    let bytes = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      bytes += chunk.byteLength;
    });
    child.once("error", reject);
    child.once("close", (code) => {
      if (code !== 0) reject(new Error(`baseline command exited ${code}`));
      else resolve({ ms: performance.now() - started, bytes });
    });
  });
}

const gcMs = gcClock();
serveRpc({ run: runDiscarding, gc: () => gcMs() });
