import type { ExecResult, Outcome } from "@remote-task/protocol";
import { TIMEOUT_EXIT_CODE } from "@remote-task/protocol";
import type { RunningCommand } from "./backend.js";
import type { EndReason } from "./logger.js";
import { chunkBytes, type TailBuffer } from "./output.js";

/** Exit code reported for a command stopped by `/cancel`, a disconnect or shutdown (as after SIGINT). */
export const CANCELLED_EXIT_CODE = 130;

/** One `/exec` call from acceptance until its sandbox is destroyed. */
export class ExecCall {
  readonly controller = new AbortController();
  readonly startedAt = Date.now();
  /** Set once when the call is ended early; never changes afterwards. */
  endedBy: EndReason | undefined;
  /** True once the command's result is decided; later end requests are ignored. */
  settled = false;
  private resolveCleaned!: () => void;
  /** Resolves when the sandbox has been destroyed and the id released. */
  readonly cleaned = new Promise<void>((resolve) => {
    this.resolveCleaned = resolve;
  });

  constructor(
    readonly sandboxId: string,
    readonly streamed: boolean,
  ) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Ends the call early (first reason wins); a no-op once the result is decided. */
  end(reason: EndReason): boolean {
    if (this.settled || this.endedBy !== undefined) return false;
    this.endedBy = reason;
    this.controller.abort(reason);
    return true;
  }

  /**
   * Settles with `value`, or with the end reason if the call is ended first, or rejects when
   * `failure` aborts first. Listeners are removed after every step: racing against promises that
   * stay pending would keep every settled value (every output chunk) reachable.
   */
  race<T>(
    value: Promise<T>,
    failure?: AbortSignal,
  ): Promise<{ ended: false; value: T } | { ended: true; reason: EndReason }> {
    const signal = this.controller.signal;
    return new Promise((resolve, reject) => {
      const onEnd = () => {
        detach();
        resolve({ ended: true, reason: this.endedBy ?? "shutdown" });
      };
      const onFailure = () => {
        detach();
        reject(failure?.reason);
      };
      const detach = () => {
        signal.removeEventListener("abort", onEnd);
        failure?.removeEventListener("abort", onFailure);
      };
      if (signal.aborted) return onEnd();
      if (failure?.aborted) return onFailure();
      signal.addEventListener("abort", onEnd, { once: true });
      failure?.addEventListener("abort", onFailure, { once: true });
      value.then(
        (v) => {
          detach();
          resolve({ ended: false, value: v });
        },
        (error: unknown) => {
          detach();
          reject(error);
        },
      );
    });
  }

  markCleaned(): void {
    this.resolveCleaned();
  }
}

/** Receives each chunk as it arrives (streamed calls forward it). */
export type ChunkSink = (stream: "stdout" | "stderr", bytes: Uint8Array) => void;

export type ConsumeOutcome =
  | { kind: "result"; result: ExecResult }
  | { kind: "failed"; error: unknown; stdoutBytes: number; stderrBytes: number };

/** Builds the result of a call from its tails; `code` and `outcome` say how it ended. */
export function buildResult(
  call: ExecCall,
  tails: { stdout: TailBuffer; stderr: TailBuffer },
  code: number,
  outcome: Outcome,
): ExecResult {
  return {
    stdout: tails.stdout.text(),
    stderr: tails.stderr.text(),
    code,
    outcome,
    durationMs: Date.now() - call.startedAt,
    stdoutBytes: tails.stdout.total,
    stderrBytes: tails.stderr.total,
    stdoutTruncated: tails.stdout.truncated,
    stderrTruncated: tails.stderr.truncated,
  };
}

/** The result for a call ended early by `reason`, with the output seen so far. */
export function endedResult(
  call: ExecCall,
  tails: { stdout: TailBuffer; stderr: TailBuffer },
  reason: EndReason,
): ExecResult {
  return reason === "timeout"
    ? buildResult(call, tails, TIMEOUT_EXIT_CODE, "timeout")
    : buildResult(call, tails, CANCELLED_EXIT_CODE, "cancelled");
}

/** Hides a late rejection of a promise we stopped waiting for. */
function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/**
 * Reads the command's output into bounded tails until it ends, then waits for its exit code;
 * stops at once when the call is ended (timeout, cancel, disconnect, shutdown).
 */
export async function consumeOutput(
  call: ExecCall,
  running: RunningCommand,
  tails: { stdout: TailBuffer; stderr: TailBuffer },
  sink?: ChunkSink,
): Promise<ConsumeOutcome> {
  const exit = quiet(running.exit);
  // A backend that reports failure while the output is still open must not be waited out.
  const exitFailed = new AbortController();
  exit.catch((error: unknown) => exitFailed.abort(error));
  const iterator = running.output[Symbol.asyncIterator]();
  let finishedIterating = false;
  try {
    for (;;) {
      const next = await call.race(quiet(iterator.next()), exitFailed.signal);
      if (next.ended) {
        call.settled = true;
        return { kind: "result", result: endedResult(call, tails, next.reason) };
      }
      if (next.value.done) {
        finishedIterating = true;
        break;
      }
      const { stream, data } = next.value.value;
      const bytes = chunkBytes(data);
      const target = stream === "stderr" ? tails.stderr : tails.stdout;
      target.push(bytes);
      sink?.(stream === "stderr" ? "stderr" : "stdout", bytes);
    }
    const exited = await call.race(exit);
    call.settled = true;
    if (exited.ended) return { kind: "result", result: endedResult(call, tails, exited.reason) };
    return { kind: "result", result: buildResult(call, tails, exited.value, "exited") };
  } catch (error) {
    call.settled = true;
    return {
      kind: "failed",
      error,
      stdoutBytes: tails.stdout.total,
      stderrBytes: tails.stderr.total,
    };
  } finally {
    if (!finishedIterating) void quiet(Promise.resolve().then(() => iterator.return?.()));
  }
}
