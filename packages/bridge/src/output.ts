import { concatBytes } from "@remote-task/internal";

// The tail kept of each stream; shared with the client, which keeps one of a too-large answer.
export { TailBuffer } from "@remote-task/internal";

const encoder = new TextEncoder();

/** Bytes of one output chunk, whatever form the backend gave it in. */
export function chunkBytes(data: Uint8Array | string): Uint8Array {
  return typeof data === "string" ? encoder.encode(data) : data;
}

const EMPTY = new Uint8Array(0);

/** Whether `byte` continues a UTF-8 character (10xxxxxx). */
function continues(byte: number | undefined): boolean {
  return byte !== undefined && (byte & 0xc0) === 0x80;
}

/** Length of the UTF-8 character a lead byte starts (1 for ASCII and for invalid bytes). */
function characterLength(lead: number): number {
  if ((lead & 0xe0) === 0xc0) return 2;
  if ((lead & 0xf0) === 0xe0) return 3;
  if ((lead & 0xf8) === 0xf0) return 4;
  return 1;
}

/** Where the incomplete character `bytes` ends with starts (its length when there is none). */
function completeLength(bytes: Uint8Array): number {
  const length = bytes.byteLength;
  for (let i = length - 1; i >= 0 && i >= length - 4; i--) {
    const byte = bytes[i] as number;
    if (continues(byte)) continue;
    return length - i < characterLength(byte) ? i : length;
  }
  return length;
}

/**
 * Decides what part of each chunk a streamed call forwards: the stream's first `cap` bytes, less
 * what the reader had no room for (`skip`), which is counted and reported with the next write
 * (`takeSkipped`). Only whole characters are forwarded: one split across chunks goes out with the
 * chunk that completes it, and one cut by a skip counts as skipped: the text forwarded and the
 * bytes skipped account for every byte of the stream's first `cap` (but a character the cap
 * itself cuts).
 */
export class ForwardGate {
  /** Bytes forwarded or skipped, at most the cap. */
  private offered = 0;
  /** The incomplete last character of the bytes taken so far. */
  private carry: Uint8Array = EMPTY;
  /** Bytes skipped and not yet reported. */
  private skipped = 0;
  /** After a skip: how many more leading continuation bytes (of a character cut) to drop. */
  private resumeCut = 0;
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });

  constructor(private readonly cap: number) {}

  /** Text to forward for `bytes`: whole characters only, nothing once the cap is reached. */
  take(bytes: Uint8Array): string {
    let part = this.within(bytes);
    if (part.byteLength === 0) return "";
    let cut = 0;
    while (this.resumeCut > 0 && continues(part[cut])) {
      cut++;
      this.resumeCut--;
    }
    if (cut < part.byteLength) this.resumeCut = 0;
    this.skipped += cut;
    part = part.subarray(cut);
    const data = this.carry.byteLength === 0 ? part : concatBytes([this.carry, part]);
    const end = completeLength(data);
    this.carry = end === data.byteLength ? EMPTY : data.slice(end);
    return end === 0 ? "" : this.decoder.decode(data.subarray(0, end));
  }

  /** Counts `bytes` as skipped (the reader had no room), with the incomplete character held. */
  skip(bytes: Uint8Array): void {
    const part = this.within(bytes);
    this.skipped += this.carry.byteLength + part.byteLength;
    this.carry = EMPTY;
    if (part.byteLength > 0) this.resumeCut = 3;
  }

  /** Bytes skipped since the last call. */
  takeSkipped(): number {
    const skipped = this.skipped;
    this.skipped = 0;
    return skipped;
  }

  /** An incomplete last character (as U+FFFD) once the stream has ended below the cap. */
  flush(): string {
    const rest = this.offered < this.cap && this.carry.byteLength > 0 ? this.carry : EMPTY;
    this.carry = EMPTY;
    return rest.byteLength === 0 ? "" : this.decoder.decode(rest);
  }

  /** The part of `bytes` within the cap, counted as offered. */
  private within(bytes: Uint8Array): Uint8Array {
    const room = this.cap - this.offered;
    if (room <= 0) return EMPTY;
    const part = bytes.byteLength > room ? bytes.subarray(0, room) : bytes;
    this.offered += part.byteLength;
    return part;
  }
}
