/**
 * How a command is stopped early: Ctrl-C (SIGINT), SIGTERM, or a reader that closed our stdout
 * (`remote-task run … | head -3`). A closed stdout ends the command quietly, as Unix tools end
 * on SIGPIPE: the remote command is cancelled, nothing more is printed, exit 141.
 */

import { EXIT } from "./exit-codes.js";

type Listener = () => void;

const outputListeners = new Set<Listener>();
let outputClosed = false;

/** True once a reader closed stdout (EPIPE). */
export function isOutputClosed(): boolean {
  return outputClosed;
}

/**
 * Watches stdout and stderr for a reader that went away. Their EPIPE would otherwise be an
 * unhandled 'error' event: a stack trace and exit 1.
 */
export function watchOutputClosed(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code !== "EPIPE" && error.code !== "ERR_STREAM_DESTROYED") throw error;
      // Also when the error arrives after the command has finished (a write still in flight).
      process.exitCode = EXIT.outputClosed;
      if (outputClosed) return;
      outputClosed = true;
      for (const listener of outputListeners) listener();
    });
  }
}

/**
 * An AbortController aborted by Ctrl-C (SIGINT), SIGTERM or a closed stdout until `dispose()` is
 * called.
 */
export function abortOnInterrupt(): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const abort = () => controller.abort();
  process.once("SIGINT", abort);
  process.once("SIGTERM", abort);
  outputListeners.add(abort);
  if (outputClosed) abort();
  return {
    signal: controller.signal,
    dispose() {
      process.off("SIGINT", abort);
      process.off("SIGTERM", abort);
      outputListeners.delete(abort);
    },
  };
}
