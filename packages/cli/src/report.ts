import type { RemoteTaskClient, TaskResult } from "@remote-task/client";
import {
  ForbiddenError,
  InvalidRequestError,
  RemoteTaskError,
  TimeoutError,
} from "@remote-task/client";
import { undeclaredSecrets, unreadableSecret } from "@remote-task/internal";
import { formatSize } from "@remote-task/protocol";
import { EXIT } from "./exit-codes.js";
import { UsageError } from "./usage-error.js";

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
function seconds(n: number): string {
  return `${n} ${n === 1 ? "second" : "seconds"}`;
}

/** What `run --stream` printed of each output, for the notes. */
export interface StreamedOutput {
  /** Bytes printed live. */
  shown: number;
  /** Bytes the bridge skipped because this reader fell behind. */
  skipped: number;
  /** The text printed held U+FFFD. */
  replaced: boolean;
}

/** How bytes that are not UTF-8 arrive: the protocol carries output as text. */
const REPLACEMENT = "\uFFFD";

/**
 * What is printed of one output: all of it, or for one the bridge cut to its end, the end from
 * its first whole line on (a kept tail starts mid-line; `| head` would show half a line first).
 */
export function shownOutput(result: TaskResult, stream: "stdout" | "stderr"): string {
  const text = result[stream];
  if (!result[`${stream}Truncated`]) return text;
  const cut = text.indexOf("\n");
  return cut === -1 || cut === text.length - 1 ? text : text.slice(cut + 1);
}

/**
 * Lines that say what was left out of the output shown, and how the task ended when it did not
 * exit. Neutral on who cut an output: a remote-task bridge keeps the end of it, and so does the
 * client for a bridge that sends it whole (the reference bridge).
 */
export function resultNotes(
  result: TaskResult,
  timeoutSeconds: number,
  streamed?: Record<"stdout" | "stderr", StreamedOutput>,
  /** `--max-output-bytes`, when given. */
  askedBytes?: number,
): string[] {
  const notes: string[] = [];
  for (const stream of ["stdout", "stderr"] as const) {
    const total = result[`${stream}Bytes`];
    const live = streamed?.[stream];
    if (live !== undefined) {
      if (live.skipped > 0) {
        notes.push(
          `${formatSize(live.skipped)} of ${stream} was skipped while streaming: this terminal or pipe read slower than the command wrote.`,
        );
      }
      if (live.shown + live.skipped < total) {
        notes.push(
          `${stream} was ${formatSize(total)}; --stream showed only its first ${formatSize(live.shown + live.skipped)} (raise --max-output-bytes to stream more).`,
        );
      }
    } else if (result[`${stream}Truncated`]) {
      const kept = Buffer.byteLength(result[stream]);
      const shown = Buffer.byteLength(shownOutput(result, stream));
      const from = shown < kept ? ", from its first whole line" : "";
      // A UTF-8 character cut at the start of the tail costs at most 3 bytes more.
      const capped = askedBytes !== undefined && kept + 4 <= askedBytes;
      notes.push(
        capped
          ? `${stream} was ${formatSize(total)}; only its last ${formatSize(shown)} is shown${from}: this bridge keeps at most ${formatSize(kept)} of an output, less than --max-output-bytes asked for (remote-task health shows its maxOutputBytes; with --local or --docker, --max-output-bytes raises it).`
          : `${stream} was ${formatSize(total)}; only its last ${formatSize(shown)} is shown${from} (raise --max-output-bytes to keep more, up to the bridge's maxOutputBytes, which remote-task health shows).`,
      );
    }
  }
  const replaced = (["stdout", "stderr"] as const).filter(
    (s) => result[s].includes(REPLACEMENT) || streamed?.[s].replaced === true,
  );
  if (replaced.length > 0) notes.push(replacementNote(replaced));
  if (result.outcome === "timeout")
    notes.push(`Command timed out after ${seconds(timeoutSeconds)}.`);
  if (result.outcome === "cancelled") notes.push("Command was cancelled.");
  return notes;
}

/** Says that output holding U+FFFD may have lost bytes: the protocol carries text, not bytes. */
function replacementNote(streams: readonly string[]): string {
  return `${streams.join(" and ")} contains U+FFFD, which is how bytes that are not UTF-8 arrive: the protocol carries output as text, so binary output is not kept byte for byte. Have the command encode it (e.g. | base64) and decode it here (base64 -d).`;
}

/** True when `text` holds U+FFFD (see {@link replacementNote}). */
export function hasReplacement(text: string): boolean {
  return text.includes(REPLACEMENT);
}

/** Request fields the command line sets, by the flag that sets them. */
const FLAG_OF_FIELD: Record<string, string> = {
  timeoutSeconds: "--timeout",
  cwd: "--cwd",
  network: "--network",
  secrets: "--secrets",
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

/**
 * A call refused over its `--secrets`, in those terms: a name the bridge does not declare (its
 * 403 lists those it does), or one whose value it cannot read (its 503 names it). Undefined for
 * any other failure.
 */
function secretsRefusal(error: unknown): string | undefined {
  if (!RemoteTaskError.isInstance(error)) return undefined;
  const undeclared = ForbiddenError.isInstance(error)
    ? undeclaredSecrets(error.bridgeMessage)
    : undefined;
  if (undeclared !== undefined) {
    const declared =
      undeclared.declared === "none"
        ? "none (its deployer declares them with remote-task serve --secret)"
        : `${undeclared.declared} (remote-task health lists them with their hosts)`;
    return `${error.name}: --secrets names ${undeclared.unknown}, which this bridge does not declare, so the command did not run; it declares ${declared}.`;
  }
  if (unreadableSecret(error.bridgeMessage) !== undefined) {
    return `${error.name}: ${error.bridgeMessage} Its deployer must fix that where the bridge runs.`;
  }
  return undefined;
}

/** One line for an error, with the error's kind so a script can tell them apart. */
export function describeError(error: unknown): string {
  const refusal = secretsRefusal(error);
  if (refusal !== undefined) return refusal;
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
  return refusedRequest(error) || UsageError.isInstance(error) ? EXIT.usage : EXIT.bridge;
}

/**
 * What is known of a remote command after an interrupt: the client sent the bridge a cancel when
 * the call was aborted; asking once more says whether the bridge has `/cancel` at all (the
 * reference bridge has none, and its command runs on to its end or its timeout).
 */
export async function cancelNote(
  client: RemoteTaskClient,
  sandboxId: string | undefined,
  timeoutSeconds: number,
): Promise<string> {
  const runsOn = `keeps running until it ends or its timeout (${seconds(timeoutSeconds)})`;
  if (sandboxId === undefined) return "the remote command was cancelled if it had started.";
  try {
    const answer = await client.cancel(sandboxId, { signal: AbortSignal.timeout(3_000) });
    return answer.supported
      ? "the remote command was cancelled."
      : `this bridge has no /cancel (the reference bridge), so the remote command, if it started, ${runsOn}.`;
  } catch (error) {
    return `the bridge could not be asked to cancel (${describeError(error)}), so the remote command, if it started, may have ended or it ${runsOn}.`;
  }
}

/**
 * `message` (a bridge's or backend's, naming its options) with the command line's flags for
 * those options, e.g. `network.ceiling` as `--network-ceiling`.
 */
export function inFlagTerms(message: string, flagOf: Readonly<Record<string, string>>): string {
  let text = message;
  for (const [option, flag] of Object.entries(flagOf)) text = text.replaceAll(option, flag);
  return text;
}
