/**
 * An exec answer as the caller's `TaskResult`: a protocol (or reference) exec result with the
 * extensions a reference bridge leaves out given defaults, and each output held to the bytes the
 * call keeps.
 */
import { TailBuffer } from "@remote-task/internal";
import { type ExecResult, utf8ByteLength } from "@remote-task/protocol";
import type { TaskResult } from "./types.js";

/**
 * A `TaskResult` from a protocol (or reference) exec result; missing extensions get defaults.
 * Each output keeps at most its last `keptBytes` (a bridge that caps nothing may send more).
 */
export function toTaskResult(
  result: ExecResult,
  sandboxId: string,
  measuredDurationMs: number,
  keptBytes: number,
): TaskResult {
  const stdout = keepEnd(result.stdout, keptBytes);
  const stderr = keepEnd(result.stderr, keptBytes);
  return {
    sandboxId,
    stdout: stdout.text,
    stderr: stderr.text,
    exitCode: result.code,
    outcome: result.outcome ?? "exited",
    durationMs: result.durationMs ?? measuredDurationMs,
    stdoutBytes: result.stdoutBytes ?? stdout.bytes ?? utf8ByteLength(result.stdout),
    stderrBytes: result.stderrBytes ?? stderr.bytes ?? utf8ByteLength(result.stderr),
    stdoutTruncated: stdout.cut || (result.stdoutTruncated ?? false),
    stderrTruncated: stderr.cut || (result.stderrTruncated ?? false),
  };
}

const encoder = new TextEncoder();

/**
 * `text`, or its last `maxBytes` UTF-8 bytes (no character cut) when it has more; `bytes` is its
 * whole size when it had to be counted.
 */
function keepEnd(text: string, maxBytes: number): { text: string; cut: boolean; bytes?: number } {
  // A UTF-16 unit is at most 3 UTF-8 bytes: a short text needs no counting.
  if (text.length * 3 <= maxBytes) return { text, cut: false };
  const bytes = encoder.encode(text);
  if (bytes.byteLength <= maxBytes) return { text, cut: false, bytes: bytes.byteLength };
  const tail = new TailBuffer(maxBytes);
  tail.push(bytes);
  return { text: tail.text(), cut: true, bytes: bytes.byteLength };
}
