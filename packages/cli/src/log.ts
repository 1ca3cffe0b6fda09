import { type BridgeLogger, stderrLogger } from "@remote-task/bridge";

/**
 * Bridge log lines go to stderr, so stdout carries only task output. `all` adds the per-call
 * info lines (for `serve`); otherwise only problems are shown.
 */
export function cliLogger(all: boolean): BridgeLogger {
  return (entry) => {
    if (all || entry.level === "error") stderrLogger(entry);
  };
}
