import type { BridgeLogger } from "@remote-task/bridge";

/**
 * Bridge log lines go to stderr, so stdout carries only task output. `all` adds the per-call
 * info lines (for `serve`); otherwise only problems are shown.
 */
export function stderrLogger(all: boolean): BridgeLogger {
  return (entry) => {
    if (all || entry.level === "error") {
      process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...entry })}\n`);
    }
  };
}
