// The tail kept of each stream; shared with the client, which keeps one of a too-large answer.
export { TailBuffer } from "@remote-task/internal";

const encoder = new TextEncoder();

/** Bytes of one output chunk, whatever form the backend gave it in. */
export function chunkBytes(data: Uint8Array | string): Uint8Array {
  return typeof data === "string" ? encoder.encode(data) : data;
}

/**
 * Decides what part of each chunk a streamed call forwards: everything until the stream's
 * forwarded total reaches the cap, nothing after. Decoding is incremental, so a character split
 * across chunks is forwarded whole.
 */
export class ForwardGate {
  private forwarded = 0;
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });

  constructor(private readonly cap: number) {}

  /** Text to forward for `bytes`, or an empty string once the cap is reached. */
  take(bytes: Uint8Array): string {
    const room = this.cap - this.forwarded;
    if (room <= 0) return "";
    const part = bytes.byteLength > room ? bytes.subarray(0, room) : bytes;
    this.forwarded += part.byteLength;
    return this.decoder.decode(part, { stream: true });
  }

  /** What the decoder still holds (an incomplete last character) once the stream has ended. */
  flush(): string {
    return this.forwarded < this.cap ? this.decoder.decode() : "";
  }
}
