import type { TaskResult } from "@remote-task/client";
import {
  ForbiddenError,
  InvalidRequestError,
  RemoteTaskError,
  TimeoutError,
} from "@remote-task/client";
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

/** `1 second`, `2 seconds`, `0.5 seconds`. */
export function seconds(n: number): string {
  return `${n} ${n === 1 ? "second" : "seconds"}`;
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
    notes.push(`Command timed out after ${seconds(timeoutSeconds)}.`);
  if (result.outcome === "cancelled") notes.push("Command was cancelled.");
  return notes;
}

/** Request fields the command line sets, by the flag that sets them. */
const FLAG_OF_FIELD: Record<string, string> = {
  timeoutSeconds: "--timeout",
  cwd: "--cwd",
  network: "--network",
};

/**
 * True when the bridge (or the client, before sending) refused the request itself: a flag value
 * or the command is out of bounds, or `--network` asks for more than the bridge allows. A usage
 * error, not a bridge failure.
 */
export function refusedRequest(error: unknown): error is InvalidRequestError | ForbiddenError {
  if (ForbiddenError.isInstance(error)) return true;
  if (!InvalidRequestError.isInstance(error)) return false;
  return error.status === undefined || error.status === 400 || error.status === 413;
}

/**
 * True when a call was refused for the stdin it carried: too large (413), or a bridge that takes
 * no stdin (the bridge's 400 at `stdin`, or the client's check of its `/health`). Not a usage
 * error: the input, not a flag, is at fault.
 */
export function refusedStdin(error: unknown): boolean {
  if (!InvalidRequestError.isInstance(error)) return false;
  const atStdin = error.issues.filter((issue) => issue.path[0] === "stdin");
  if (error.status === undefined) {
    return atStdin.some((issue) => issue.message.startsWith("not supported by this bridge"));
  }
  return error.status === 413 || atStdin.length > 0;
}

/** One line for an error, with the error's kind so a script can tell them apart. */
export function describeError(error: unknown): string {
  if (ForbiddenError.isInstance(error)) {
    return `${error.name}: ${error.message} Check --network; \`remote-task health\` shows the bridge's network default and ceiling.`;
  }
  if (InvalidRequestError.isInstance(error) && refusedRequest(error)) {
    const flags = error.issues
      .map((issue) => FLAG_OF_FIELD[String(issue.path[0])])
      .filter((flag): flag is string => flag !== undefined);
    const hint = flags.length > 0 ? ` Check ${[...new Set(flags)].join(" and ")}.` : "";
    return `${error.name}: ${error.message}${hint}`;
  }
  if (TimeoutError.isInstance(error)) {
    return `${error.name}: ${error.message} On the command line: --timeout <seconds> and --grace <seconds>.`;
  }
  if (RemoteTaskError.isInstance(error)) return `${error.name}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}

/** The exit code for a task that could not be run: 2 when the request itself was refused. */
export function exitCodeOfError(error: unknown): number {
  return refusedRequest(error) ? EXIT.usage : EXIT.bridge;
}
