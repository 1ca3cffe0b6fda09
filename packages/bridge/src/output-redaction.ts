/**
 * Puts each secret's placeholder back where its value appears in a command's output, before the
 * bridge counts, keeps, streams or replays a byte of it: the value never reaches an answer, even
 * when an upstream echoes it in a response body (which the egress proxy does not filter: a body
 * may be compressed) and the command prints that. Per stream, the bytes ending a chunk that could
 * begin a value are held until the stream's next chunk shows whether they do (they go out at the
 * end of the output, or are dropped when the call ends before it: at most a value's length less
 * one); nothing else is delayed.
 */
import { concatBytes } from "@remote-task/internal";
import type { OutputChunk } from "./backend.js";
import { chunkBytes } from "./output.js";

/** A value to hide and what stands in its place. */
export interface Hidden {
  value: string;
  placeholder: string;
}

interface Pattern {
  value: Uint8Array;
  placeholder: Uint8Array;
}

const encoder = new TextEncoder();

/** Whether `needle` occurs in `bytes` at `at`. */
function occursAt(bytes: Uint8Array, needle: Uint8Array, at: number): boolean {
  if (at + needle.byteLength > bytes.byteLength) return false;
  for (let i = 0; i < needle.byteLength; i++) if (bytes[at + i] !== needle[i]) return false;
  return true;
}

/** How many bytes ending `bytes` are a proper beginning of some value (the longest). */
function heldLength(bytes: Uint8Array, patterns: readonly Pattern[]): number {
  const end = bytes.byteLength;
  let held = 0;
  for (const { value } of patterns) {
    for (let length = Math.min(value.byteLength - 1, end); length > held; length--) {
      if (bytes[end - length] !== value[0]) continue;
      if (occursAt(bytes.subarray(end - length), value.subarray(0, length), 0)) {
        held = length;
        break;
      }
    }
  }
  return held;
}

/** The first value at or after `from` (at one position, the longest value). */
function nextMatch(
  bytes: Uint8Array,
  patterns: readonly Pattern[],
  from: number,
): { at: number; pattern: Pattern } | undefined {
  let best: { at: number; pattern: Pattern } | undefined;
  for (const pattern of patterns) {
    const first = pattern.value[0] as number;
    for (let at = bytes.indexOf(first, from); at !== -1; at = bytes.indexOf(first, at + 1)) {
      if (best !== undefined && at >= best.at) break;
      if (occursAt(bytes, pattern.value, at)) {
        best = { at, pattern };
        break;
      }
    }
  }
  return best;
}

/** `bytes` with every value replaced by its placeholder, left to right. */
function replaced(bytes: Uint8Array, patterns: readonly Pattern[]): Uint8Array {
  const parts: Uint8Array[] = [];
  let from = 0;
  for (let match = nextMatch(bytes, patterns, 0); match !== undefined; ) {
    parts.push(bytes.subarray(from, match.at), match.pattern.placeholder);
    from = match.at + match.pattern.value.byteLength;
    match = nextMatch(bytes, patterns, from);
  }
  if (parts.length === 0) return bytes;
  parts.push(bytes.subarray(from));
  return concatBytes(parts);
}

/**
 * `output` with every secret's value replaced by its placeholder (see the top of this file). Its
 * `return()` reaches the backend's output at once, as the bridge's early end expects, even while
 * a `next()` is pending (which an async generator would wait for).
 */
export function redactOutput(
  output: AsyncIterable<OutputChunk>,
  hidden: readonly Hidden[],
): AsyncIterable<OutputChunk> {
  const patterns = hidden
    .filter((entry) => entry.value !== "")
    .map((entry) => ({
      value: encoder.encode(entry.value),
      placeholder: encoder.encode(entry.placeholder),
    }))
    .sort((a, b) => b.value.byteLength - a.value.byteLength);
  const held: Record<OutputChunk["stream"], Uint8Array> = {
    stdout: new Uint8Array(0),
    stderr: new Uint8Array(0),
  };
  const source = output[Symbol.asyncIterator]();
  /** What is left to give at the end: the held bytes of each stream. */
  const rest = (): IteratorResult<OutputChunk> => {
    for (const stream of ["stdout", "stderr"] as const) {
      const data = held[stream];
      if (data.byteLength === 0) continue;
      held[stream] = new Uint8Array(0);
      return { done: false, value: { stream, data } };
    }
    return { done: true, value: undefined };
  };
  let ended = false;
  const iterator: AsyncIterator<OutputChunk> = {
    async next() {
      while (!ended) {
        const next = await source.next();
        if (next.done === true) {
          ended = true;
          break;
        }
        const { stream } = next.value;
        const incoming = chunkBytes(next.value.data);
        const before = held[stream];
        const out = replaced(
          before.byteLength === 0 ? incoming : concatBytes([before, incoming]),
          patterns,
        );
        // A replacement never leaves part of a value, so what could begin one is at the very end.
        const hold = heldLength(out, patterns);
        held[stream] = out.slice(out.byteLength - hold);
        if (out.byteLength > hold) {
          return { done: false, value: { stream, data: out.subarray(0, out.byteLength - hold) } };
        }
      }
      return rest();
    },
    async return() {
      ended = true;
      await source.return?.();
      return { done: true, value: undefined };
    },
  };
  return { [Symbol.asyncIterator]: () => iterator };
}
