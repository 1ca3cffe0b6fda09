/**
 * An exec answer as the caller's `TaskResult`: a protocol (or reference) exec result with the
 * extensions a reference bridge leaves out given defaults, and each output held to the bytes the
 * call keeps.
 */
import { TailBuffer } from "@remote-task/internal";
import {
  type ExecResult,
  referenceErrorBodySchema,
  TIMEOUT_EXIT_CODE,
  utf8ByteLength,
} from "@remote-task/protocol";
import { parseJson } from "./json.js";
import type { TaskResult } from "./types.js";

/**
 * The Cloudflare sandbox SDK's words for a command that ran out of its time ("Failed to execute
 * command '…' in session '…': Command timeout after 5000ms"), which the reference bridge passes on
 * as HTTP 500 `{error}`.
 */
const SDK_TIMEOUT = /\bcommand timeout after \d+\s*ms\b/i;

/**
 * The exec result a reference bridge's error answer stands for when it reports the command's
 * timeout (HTTP 500 `{error}` with the SDK's text, no protocol `code`): the command timed out
 * (outcome `timeout`, exit code 124), as a remote-task bridge reports it. Undefined otherwise.
 */
export function referenceTimeout(
  status: number,
  bytes: Uint8Array | undefined,
): ExecResult | undefined {
  if (status !== 500 || bytes === undefined) return undefined;
  const parsed = parseJson(bytes);
  if (!parsed.ok || typeof parsed.value !== "object" || parsed.value === null) return undefined;
  if ("code" in parsed.value) return undefined;
  const body = referenceErrorBodySchema.safeParse(parsed.value);
  if (!body.success || !SDK_TIMEOUT.test(body.data.error)) return undefined;
  return { stdout: "", stderr: "", code: TIMEOUT_EXIT_CODE, outcome: "timeout" };
}

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
