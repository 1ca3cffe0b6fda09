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

/** What stopped a command early. */
export type Interruption = "SIGINT" | "SIGTERM" | "output closed";

/**
 * An AbortController aborted by Ctrl-C (SIGINT), SIGTERM or a closed stdout until `dispose()` is
 * called; `by()` says which came first.
 */
export function abortOnInterrupt(): {
  signal: AbortSignal;
  by(): Interruption | undefined;
  dispose(): void;
} {
  const controller = new AbortController();
  let by: Interruption | undefined;
  const abortBy = (what: Interruption) => () => {
    by ??= what;
    controller.abort();
  };
  const onInt = abortBy("SIGINT");
  const onTerm = abortBy("SIGTERM");
  const onClosed = abortBy("output closed");
  process.once("SIGINT", onInt);
  process.once("SIGTERM", onTerm);
  outputListeners.add(onClosed);
  if (outputClosed) onClosed();
  return {
    signal: controller.signal,
    by: () => by,
    dispose() {
      process.off("SIGINT", onInt);
      process.off("SIGTERM", onTerm);
      outputListeners.delete(onClosed);
    },
  };
}

/** The exit code for a command stopped by `by`: 130 for Ctrl-C, 143 for SIGTERM, 141 for | head. */
export function interruptedExitCode(by: Interruption | undefined): number {
  if (by === "SIGTERM") return EXIT.terminated;
  if (by === "output closed") return EXIT.outputClosed;
  return EXIT.interrupted;
}

/** "interrupted" for Ctrl-C, "terminated" for SIGTERM. */
export function interruptedWord(by: Interruption | undefined): string {
  return by === "SIGTERM" ? "terminated (SIGTERM)" : "interrupted";
}
