/**
 * The attach stream of a container without a TTY: frames of an 8-byte header (stream type 1
 * stdout or 2 stderr, three zero bytes, the payload size as a big-endian uint32) and the payload.
 * Read with backpressure: a frame is taken from the socket only when the consumer asks for it.
 */

import type { Readable } from "node:stream";
import type { OutputChunk } from "../backend.js";

const HEADER_BYTES = 8;

/** Reads frames off `stream` one at a time; `undefined` once the stream has ended. */
export class FrameReader {
  readonly #source: AsyncIterator<Buffer>;
  #buffer: Buffer = Buffer.alloc(0);
  #ended = false;
  #markEnded!: () => void;
  /** Resolves once the stream has ended (or broke, or was closed). */
  readonly ended: Promise<void> = new Promise((resolve) => {
    this.#markEnded = resolve;
  });

  constructor(stream: Readable) {
    this.#source = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  }

  async #fill(bytes: number): Promise<boolean> {
    while (this.#buffer.length < bytes) {
      if (this.#ended) return false;
      let step: IteratorResult<Buffer>;
      try {
        step = await this.#source.next();
      } catch {
        // The connection broke (the container was removed): the output ends here.
        step = { done: true, value: undefined };
      }
      if (step.done) {
        this.#ended = true;
        this.#markEnded();
        return false;
      }
      this.#buffer =
        this.#buffer.length === 0 ? step.value : Buffer.concat([this.#buffer, step.value]);
    }
    return true;
  }

  async next(): Promise<OutputChunk | undefined> {
    for (;;) {
      if (!(await this.#fill(HEADER_BYTES))) return undefined;
      const type = this.#buffer[0];
      const size = this.#buffer.readUInt32BE(4);
      if (!(await this.#fill(HEADER_BYTES + size))) return undefined;
      const data = this.#buffer.subarray(HEADER_BYTES, HEADER_BYTES + size);
      this.#buffer = this.#buffer.subarray(HEADER_BYTES + size);
      // Type 0 would be stdin echoed back, which a container without a TTY never sends.
      if (size === 0 || (type !== 1 && type !== 2)) continue;
      return { stream: type === 1 ? "stdout" : "stderr", data };
    }
  }

  /** Stops reading; the socket is the caller's to destroy. */
  async close(): Promise<void> {
    this.#ended = true;
    this.#markEnded();
    await this.#source.return?.();
  }
}
