import type { TaskResult } from "@remote-task/client";
import { RemoteTaskError } from "@remote-task/client";
import { formatSize } from "@remote-task/protocol";
import { EXIT } from "./exit-codes.js";

/** The result as protocol `ExecResult` fields plus the sandbox id (what `--json` prints). */
export function resultJson(result: TaskResult) {
  return {
    sandboxId: result.sandboxId,
    stdout: result.stdout,
    stderr: result.stderr,
    code: result.exitCode,
    outcome: result.outcome,
    durationMs: result.durationMs,
    stdoutBytes: result.stdoutBytes,
    stderrBytes: result.stderrBytes,
    stdoutTruncated: result.stdoutTruncated,
    stderrTruncated: result.stderrTruncated,
  };
}

/** The exit code that stands for a task's result. */
export function exitCodeOf(result: TaskResult): number {
  if (result.outcome === "timeout") return EXIT.timeout;
  if (result.outcome === "cancelled") return EXIT.interrupted;
  return result.exitCode;
}

/** Lines that say what the bridge left out, or how the task ended when it did not exit. */
export function resultNotes(result: TaskResult, timeoutSeconds: number): string[] {
  const notes: string[] = [];
  for (const stream of ["stdout", "stderr"] as const) {
    if (result[`${stream}Truncated`]) {
      const total = result[`${stream}Bytes`];
      notes.push(`${stream} was ${formatSize(total)}; the bridge kept only its end.`);
    }
  }
  if (result.outcome === "timeout")
    notes.push(`Command timed out after ${timeoutSeconds} seconds.`);
  if (result.outcome === "cancelled") notes.push("Command was cancelled.");
  return notes;
}

/** One line for an error, with the error's kind so a script can tell them apart. */
export function describeError(error: unknown): string {
  if (RemoteTaskError.isInstance(error)) return `${error.name}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}
