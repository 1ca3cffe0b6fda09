/** The last `cap` bytes of a stream (a ring once full) plus the exact total written. */
export class TailBuffer {
  private buf = new Uint8Array(0);
  private start = 0;
  private length = 0;
  /** Every byte written, retained or not. */
  total = 0;

  constructor(readonly cap: number) {}

  get truncated(): boolean {
    return this.total > this.length;
  }

  push(bytes: Uint8Array): void {
    if (bytes.byteLength === 0) return;
    this.total += bytes.byteLength;
    const cap = this.cap;
    if (bytes.byteLength >= cap) {
      this.ensureCapacity(cap, false);
      this.buf.set(bytes.subarray(bytes.byteLength - cap));
      this.start = 0;
      this.length = cap;
      return;
    }
    const needed = this.length + bytes.byteLength;
    if (this.buf.byteLength < cap && needed > this.buf.byteLength) {
      this.ensureCapacity(Math.min(cap, Math.max(needed, this.buf.byteLength * 2, 1024)), true);
    }
    const size = this.buf.byteLength;
    const end = (this.start + this.length) % size;
    const first = Math.min(bytes.byteLength, size - end);
    this.buf.set(bytes.subarray(0, first), end);
    if (first < bytes.byteLength) this.buf.set(bytes.subarray(first), 0);
    if (needed > size) {
      this.start = (this.start + needed - size) % size;
      this.length = size;
    } else {
      this.length = needed;
    }
  }

  /** The retained bytes, oldest first. */
  bytes(): Uint8Array {
    const size = this.buf.byteLength;
    if (this.start + this.length <= size) {
      return this.buf.subarray(this.start, this.start + this.length);
    }
    const out = new Uint8Array(this.length);
    const head = this.buf.subarray(this.start);
    out.set(head);
    out.set(this.buf.subarray(0, this.length - head.byteLength), head.byteLength);
    return out;
  }

  /** The retained bytes as text; a character cut at the start of a truncated tail is dropped. */
  text(): string {
    let bytes = this.bytes();
    if (this.truncated) {
      let skip = 0;
      while (skip < 3 && skip < bytes.byteLength && ((bytes[skip] ?? 0) & 0xc0) === 0x80) skip++;
      bytes = bytes.subarray(skip);
    }
    return new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(bytes);
  }

  /** Frees the retained bytes (the result has them by now); `total` stays. */
  release(): void {
    this.buf = new Uint8Array(0);
    this.start = 0;
    this.length = 0;
  }

  /** Grows the buffer (only before it is a full ring), keeping the retained bytes in order. */
  private ensureCapacity(size: number, keep: boolean): void {
    if (this.buf.byteLength >= size) return;
    const next = new Uint8Array(size);
    if (keep) next.set(this.bytes());
    this.buf = next;
    this.start = 0;
  }
}
