/**
 * What a re-attached event stream replays while its call runs: the first `cap` bytes of each
 * output, in the order the command wrote them (the same bytes a stream of the call forwards),
 * each piece with its byte offset in its stream, so a reader resumes from where it was.
 * Bounded by the cap per stream, like the retained tails; dropped with the call.
 */
import { utf8ByteLength } from "@remote-task/protocol";
import { ForwardGate } from "./output.js";

type Stream = "stdout" | "stderr";

/** One piece of output: its text and where its first byte is in its stream. */
export interface ReplayEntry {
  readonly stream: Stream;
  readonly offset: number;
  readonly text: string;
  /** UTF-8 bytes of `text`. */
  readonly bytes: number;
}

/** Where a reader is in each stream, in bytes. */
export interface StreamOffsets {
  stdout: number;
  stderr: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The part of `entry` from byte `from` of its stream on ("" when the reader has all of it). */
export function entryFrom(entry: ReplayEntry, from: number): string {
  if (from <= entry.offset) return entry.text;
  if (from >= entry.offset + entry.bytes) return "";
  return decoder.decode(encoder.encode(entry.text).subarray(from - entry.offset));
}

/** The output of a running call, as far as a re-attached stream replays it. */
export class ReplayLog {
  readonly entries: ReplayEntry[] = [];
  readonly #gates: Record<Stream, ForwardGate>;
  readonly #offsets: StreamOffsets = { stdout: 0, stderr: 0 };
  #ended = false;
  #wake: (() => void) | undefined;
  #changed: Promise<void> | undefined;

  constructor(cap: number) {
    this.#gates = { stdout: new ForwardGate(cap), stderr: new ForwardGate(cap) };
  }

  /** Records what of `bytes` is within the stream's cap. */
  push(stream: Stream, bytes: Uint8Array): void {
    this.#add(stream, this.#gates[stream].take(bytes));
  }

  /** The output ended (or the call did): no more entries. */
  end(): void {
    if (this.#ended) return;
    for (const stream of ["stdout", "stderr"] as const)
      this.#add(stream, this.#gates[stream].flush());
    this.#ended = true;
    this.#notify();
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Resolves once an entry is added or the log ends. */
  changed(): Promise<void> {
    this.#changed ??= new Promise((resolve) => {
      this.#wake = resolve;
    });
    return this.#changed;
  }

  #add(stream: Stream, text: string): void {
    if (text.length === 0) return;
    const bytes = utf8ByteLength(text);
    this.entries.push({ stream, offset: this.#offsets[stream], text, bytes });
    this.#offsets[stream] += bytes;
    this.#notify();
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    this.#changed = undefined;
    wake?.();
  }
}
