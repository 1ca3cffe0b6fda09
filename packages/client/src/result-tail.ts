/**
 * Reading an exec result too large to hold: a bridge that caps nothing (the reference one) sends
 * all of a command's output. The body is scanned byte by byte as it arrives; the bytes of the
 * `stdout` and `stderr` strings go straight into a fixed ring (`TailBuffer`) that keeps their
 * last `keptBytes`, with exact totals; the other fields of the result are read whole (they are
 * small); everything else is checked as JSON and dropped.
 *
 * Why not a streaming tokenizer library: stream-json, the well-kept one, was tried first. It hands
 * out a token object and a string for every 256 characters and every escape, and that garbage
 * grew the client's RSS by 53-70 MiB on a 40 MiB answer with a `Content-Length`, against a bound
 * of 64 MiB. This scanner allocates nothing per byte (31-39 MiB in the same test, most of it the
 * HTTP client's own buffers; about 0.4 s of CPU for 40 MiB) and is checked against `JSON.parse`
 * by property tests (test/result-tail.test.ts).
 *
 * Outputs are kept as bytes, so two things read differently from a whole read, both only from a
 * bridge sending what no remote-task bridge sends: a lone surrogate escape (`\ud800`) comes back
 * as U+FFFD (it counts 3 bytes either way), and bytes that are not UTF-8 inside a string count as
 * they are (a whole read counts each U+FFFD they decode to as 3).
 */
import { TailBuffer } from "@remote-task/internal";
import { execResultSchema } from "@remote-task/protocol";
import type { ParsedJson } from "./json.js";

/** Longest value kept of a field other than `stdout`/`stderr`; a longer one reads as `null`. */
const MAX_FIELD_BYTES = 1024;
/** Deepest nesting accepted; deeper is refused as not JSON (an exec result nests one level). */
const MAX_DEPTH = 1024;
/** The fields of an exec result; any other field is checked and skipped. */
const FIELDS: ReadonlySet<string> = new Set(Object.keys(execResultSchema.shape));

type Output = "stdout" | "stderr";
const isOutput = (key: string | undefined): key is Output => key === "stdout" || key === "stderr";

// What the scanner expects next.
const BOM = 0; // the start: a UTF-8 byte-order mark (skipped, as TextDecoder does) or a value
const VALUE = 1; // a value
const VALUE_OR_CLOSE = 2; // a value or `]` (just after `[`)
const KEY_OR_CLOSE = 3; // a key or `}` (just after `{`)
const KEY = 4; // a key (after `,` in an object)
const COLON = 5;
const AFTER = 6; // `,` or the closer of the container the value is in
const STRING = 7; // inside a string
const ESCAPE = 8; // after a backslash in a string
const UNICODE = 9; // inside the four hex digits of `\u`
const NUMBER = 10;
const LITERAL = 11; // inside `true`, `false` or `null`
const DONE = 12; // after the answer's value: white space only

// Where a number is in RFC 8259's grammar; the terminal ones may end the number.
const N_MINUS = 0;
const N_ZERO = 1;
const N_INT = 2;
const N_DOT = 3;
const N_FRAC = 4;
const N_E = 5;
const N_E_SIGN = 6;
const N_EXP = 7;
const NUMBER_TERMINAL = [false, true, true, false, true, false, false, true];

const OBJECT = 1;
const ARRAY = 2;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const BYTE_ORDER_MARK = [0xef, 0xbb, 0xbf];
/** The byte each one-character escape stands for, by the character after the backslash. */
const SIMPLE_ESCAPES = new Map<number, number>([
  [0x22, 0x22],
  [0x5c, 0x5c],
  [0x2f, 0x2f],
  [0x62, 0x08],
  [0x66, 0x0c],
  [0x6e, 0x0a],
  [0x72, 0x0d],
  [0x74, 0x09],
]);
const LITERALS = new Map<number, { bytes: Uint8Array; value: boolean | null }>([
  [0x74, { bytes: new TextEncoder().encode("true"), value: true }],
  [0x66, { bytes: new TextEncoder().encode("false"), value: false }],
  [0x6e, { bytes: new TextEncoder().encode("null"), value: null }],
]);
/** U+FFFD, what a lone surrogate escape becomes in UTF-8 (as `TextEncoder` writes it). */
const REPLACEMENT = new Uint8Array([0xef, 0xbf, 0xbd]);

const isWhiteSpace = (b: number) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;

function hexValue(b: number): number {
  if (isDigit(b)) return b - 0x30;
  const lower = b | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

/** The next state of a number after byte `b`, or -1 when `b` does not continue it. */
function numberStep(state: number, b: number): number {
  const digit = isDigit(b);
  const exponent = b === 0x65 || b === 0x45;
  switch (state) {
    case N_MINUS:
      return b === 0x30 ? N_ZERO : digit ? N_INT : -1;
    case N_ZERO:
      return b === 0x2e ? N_DOT : exponent ? N_E : -1;
    case N_INT:
      return digit ? N_INT : b === 0x2e ? N_DOT : exponent ? N_E : -1;
    case N_DOT:
      return digit ? N_FRAC : -1;
    case N_FRAC:
      return digit ? N_FRAC : exponent ? N_E : -1;
    case N_E:
      return b === 0x2b || b === 0x2d ? N_E_SIGN : digit ? N_EXP : -1;
    default:
      return digit ? N_EXP : -1;
  }
}

/** Somewhere the bytes of a string's content (escapes resolved) or of a number go. */
interface Sink {
  push(bytes: Uint8Array): void;
}

/** At most {@link MAX_FIELD_BYTES} bytes of a small value; more marks it as too long. */
class SmallBytes implements Sink {
  readonly #bytes = new Uint8Array(MAX_FIELD_BYTES);
  #length = 0;
  tooLong = false;

  reset(): this {
    this.#length = 0;
    this.tooLong = false;
    return this;
  }

  push(bytes: Uint8Array): void {
    if (this.#length + bytes.byteLength > MAX_FIELD_BYTES) this.tooLong = true;
    else {
      this.#bytes.set(bytes, this.#length);
      this.#length += bytes.byteLength;
    }
  }

  /** The bytes as text, or undefined when they were too long. */
  text(): string | undefined {
    return this.tooLong ? undefined : decoder.decode(this.#bytes.subarray(0, this.#length));
  }
}

const decoder = new TextDecoder();
/** Where one character of an escape is encoded before it is pushed (pushes copy). */
const scratch = new Uint8Array(4);

function utf8(codePoint: number): Uint8Array {
  if (codePoint < 0x80) {
    scratch[0] = codePoint;
    return scratch.subarray(0, 1);
  }
  if (codePoint < 0x800) {
    scratch[0] = 0xc0 | (codePoint >> 6);
    scratch[1] = 0x80 | (codePoint & 0x3f);
    return scratch.subarray(0, 2);
  }
  if (codePoint < 0x10000) {
    scratch[0] = 0xe0 | (codePoint >> 12);
    scratch[1] = 0x80 | ((codePoint >> 6) & 0x3f);
    scratch[2] = 0x80 | (codePoint & 0x3f);
    return scratch.subarray(0, 3);
  }
  scratch[0] = 0xf0 | (codePoint >> 18);
  scratch[1] = 0x80 | ((codePoint >> 12) & 0x3f);
  scratch[2] = 0x80 | ((codePoint >> 6) & 0x3f);
  scratch[3] = 0x80 | (codePoint & 0x3f);
  return scratch.subarray(0, 4);
}

/**
 * Scans one JSON value pushed in chunks of bytes and builds the exec result it holds: each
 * output is its tail with the total the bridge declared, or the total counted here.
 */
class ResultScanner {
  readonly #keptBytes: number;
  #state = BOM;
  #bomIndex = 0;
  readonly #stack = new Uint8Array(MAX_DEPTH);
  #depth = 0;
  /** What the answer itself is: undecided, an object, or anything else. */
  #top: "none" | "object" | "other" = "none";
  #failed = false;

  // The string being read.
  #stringIsKey = false;
  #sink: Sink | undefined;
  #unicode = 0;
  #unicodeDigits = 0;
  #highSurrogate = 0;
  // The number or literal being read.
  #numberState = 0;
  #literal: { bytes: Uint8Array; value: boolean | null } | undefined;
  #literalIndex = 0;

  // The exec result.
  #key: string | undefined;
  readonly #keyBytes = new SmallBytes();
  readonly #scalar = new SmallBytes();
  readonly #fields: Record<string, unknown> = {};
  readonly #tails: Partial<Record<Output, TailBuffer>> = {};

  constructor(keptBytes: number) {
    this.#keptBytes = keptBytes;
  }

  /** Scans the next bytes; false once the body is not JSON. */
  push(chunk: Uint8Array): boolean {
    if (this.#failed) return false;
    const length = chunk.byteLength;
    let i = 0;
    while (i < length) {
      const b = chunk[i] as number;
      switch (this.#state) {
        case STRING: {
          // The common case, output text: find the end of the plain run and copy it at once.
          let end = i;
          for (let c = b; c !== QUOTE && c !== BACKSLASH && c >= 0x20; c = chunk[end] as number) {
            if (++end === length) break;
          }
          if (end > i) {
            this.#flushSurrogate();
            this.#sink?.push(chunk.subarray(i, end));
            i = end;
            continue;
          }
          i++;
          if (b === QUOTE) this.#endString();
          else if (b === BACKSLASH) this.#state = ESCAPE;
          else return this.#fail(); // a control character must be escaped
          continue;
        }
        case ESCAPE: {
          i++;
          if (b === 0x75) {
            this.#state = UNICODE;
            this.#unicode = 0;
            this.#unicodeDigits = 0;
            continue;
          }
          const decoded = SIMPLE_ESCAPES.get(b);
          if (decoded === undefined) return this.#fail();
          this.#flushSurrogate();
          this.#sink?.push(utf8(decoded));
          this.#state = STRING;
          continue;
        }
        case UNICODE: {
          const digit = hexValue(b);
          if (digit < 0) return this.#fail();
          i++;
          this.#unicode = this.#unicode * 16 + digit;
          if (++this.#unicodeDigits === 4) {
            this.#codeUnit(this.#unicode);
            this.#state = STRING;
          }
          continue;
        }
        case NUMBER: {
          const next = numberStep(this.#numberState, b);
          if (next >= 0) {
            this.#numberState = next;
            this.#sink?.push(chunk.subarray(i, i + 1));
            i++;
          } else if (NUMBER_TERMINAL[this.#numberState]) this.#endNumber();
          else return this.#fail();
          continue;
        }
        case LITERAL: {
          const literal = this.#literal as { bytes: Uint8Array; value: boolean | null };
          if (b !== literal.bytes[this.#literalIndex]) return this.#fail();
          i++;
          if (++this.#literalIndex === literal.bytes.byteLength) this.#endScalar(literal.value);
          continue;
        }
        case BOM: {
          if (this.#bomIndex === 0 && b !== BYTE_ORDER_MARK[0]) {
            this.#state = VALUE;
            continue;
          }
          if (b !== BYTE_ORDER_MARK[this.#bomIndex]) return this.#fail();
          i++;
          if (++this.#bomIndex === BYTE_ORDER_MARK.length) this.#state = VALUE;
          continue;
        }
        default:
          i++;
          if (isWhiteSpace(b)) continue;
          if (!this.#structural(b)) return this.#fail();
      }
    }
    return true;
  }

  /** The result once every byte was pushed; `{ok: false}` when the body is not one JSON value. */
  end(): ParsedJson {
    if (this.#state === NUMBER && NUMBER_TERMINAL[this.#numberState]) this.#endNumber();
    if (this.#failed || this.#state !== DONE) return { ok: false };
    if (this.#top !== "object") return { ok: true, value: null };
    const result: Record<string, unknown> = { ...this.#fields };
    for (const output of ["stdout", "stderr"] as const) {
      const tail = this.#tails[output];
      if (tail === undefined) continue;
      result[output] = tail.text();
      if (result[`${output}Bytes`] === undefined) result[`${output}Bytes`] = tail.total;
      if (tail.truncated) result[`${output}Truncated`] = true;
    }
    return { ok: true, value: result };
  }

  /** A byte outside strings, numbers and literals (white space already skipped). */
  #structural(b: number): boolean {
    switch (this.#state) {
      case VALUE_OR_CLOSE:
        if (b === 0x5d) return this.#close(ARRAY);
        return this.#value(b);
      case VALUE:
        return this.#value(b);
      case KEY_OR_CLOSE:
        if (b === 0x7d) return this.#close(OBJECT);
        return b === QUOTE && this.#startKey();
      case KEY:
        return b === QUOTE && this.#startKey();
      case COLON:
        if (b !== 0x3a) return false;
        this.#state = VALUE;
        return true;
      case AFTER: {
        const container = this.#stack[this.#depth - 1];
        if (b === 0x2c) {
          this.#state = container === OBJECT ? KEY : VALUE;
          return true;
        }
        if (b === 0x7d) return this.#close(OBJECT);
        if (b === 0x5d) return this.#close(ARRAY);
        return false;
      }
      default:
        return false;
    }
  }

  /** The first byte of a value. */
  #value(b: number): boolean {
    if (this.#top === "none") this.#top = b === 0x7b ? "object" : "other";
    if (b === 0x7b || b === 0x5b) {
      this.#setField(b === 0x7b ? {} : []);
      if (this.#depth === MAX_DEPTH) return false;
      this.#stack[this.#depth++] = b === 0x7b ? OBJECT : ARRAY;
      this.#state = b === 0x7b ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
      return true;
    }
    if (b === QUOTE) {
      this.#stringIsKey = false;
      const key = this.#fieldKey();
      if (isOutput(key)) {
        const tail = new TailBuffer(this.#keptBytes);
        this.#tails[key] = tail;
        delete this.#fields[key];
        this.#sink = tail;
      } else this.#sink = key === undefined ? undefined : this.#scalar.reset();
      this.#state = STRING;
      return true;
    }
    if (b === 0x2d || isDigit(b)) {
      this.#sink = this.#fieldKey() === undefined ? undefined : this.#scalar.reset();
      this.#sink?.push(utf8(b));
      this.#numberState = b === 0x2d ? N_MINUS : b === 0x30 ? N_ZERO : N_INT;
      this.#state = NUMBER;
      return true;
    }
    const literal = LITERALS.get(b);
    if (literal === undefined) return false;
    this.#literal = literal;
    this.#literalIndex = 1;
    this.#state = LITERAL;
    return true;
  }

  #startKey(): boolean {
    this.#stringIsKey = true;
    this.#sink = this.#depth === 1 && this.#top === "object" ? this.#keyBytes.reset() : undefined;
    this.#state = STRING;
    return true;
  }

  #close(kind: number): boolean {
    if (this.#depth === 0 || this.#stack[this.#depth - 1] !== kind) return false;
    this.#depth--;
    this.#afterValue();
    return true;
  }

  #afterValue(): void {
    this.#state = this.#depth === 0 ? DONE : AFTER;
  }

  /** The key of the value starting now when it is a field of the result, else undefined. */
  #fieldKey(): string | undefined {
    if (this.#depth !== 1 || this.#top !== "object") return undefined;
    return this.#key !== undefined && FIELDS.has(this.#key) ? this.#key : undefined;
  }

  #setField(value: unknown): void {
    const key = this.#fieldKey();
    if (key === undefined) return;
    this.#fields[key] = value;
    if (isOutput(key)) delete this.#tails[key];
  }

  #endString(): void {
    this.#flushSurrogate();
    const sink = this.#sink;
    this.#sink = undefined;
    if (this.#stringIsKey) {
      if (sink === this.#keyBytes) this.#key = this.#keyBytes.text();
      this.#state = COLON;
      return;
    }
    if (sink === this.#scalar) this.#setField(this.#scalar.tooLong ? null : this.#scalar.text());
    this.#afterValue();
  }

  #endNumber(): void {
    const sink = this.#sink;
    this.#sink = undefined;
    if (sink === this.#scalar) {
      const text = this.#scalar.text();
      this.#setField(text === undefined ? null : Number(text));
    }
    this.#afterValue();
  }

  #endScalar(value: boolean | null): void {
    this.#setField(value);
    this.#afterValue();
  }

  /** A `\uXXXX` code unit; surrogate pairs are joined, a lone surrogate becomes U+FFFD. */
  #codeUnit(unit: number): void {
    const high = this.#highSurrogate;
    this.#highSurrogate = 0;
    if (high !== 0) {
      if (unit >= 0xdc00 && unit <= 0xdfff) {
        this.#sink?.push(utf8(0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00)));
        return;
      }
      this.#sink?.push(REPLACEMENT);
    }
    if (unit >= 0xd800 && unit <= 0xdbff) this.#highSurrogate = unit;
    else if (unit >= 0xdc00 && unit <= 0xdfff) this.#sink?.push(REPLACEMENT);
    else this.#sink?.push(utf8(unit));
  }

  /** A high surrogate escape not followed by its low half stands alone: U+FFFD. */
  #flushSurrogate(): void {
    if (this.#highSurrogate === 0) return;
    this.#highSurrogate = 0;
    this.#sink?.push(REPLACEMENT);
  }

  #fail(): false {
    this.#failed = true;
    return false;
  }
}

/**
 * Reads a JSON exec result from `chunks` keeping the last `keptBytes` of `stdout` and of
 * `stderr`; `{ok: false}` when the bytes are not one JSON value. A failure of `chunks` itself
 * (the connection) is thrown.
 */
export async function readResultTail(
  chunks: AsyncIterable<Uint8Array>,
  keptBytes: number,
): Promise<ParsedJson> {
  const scanner = new ResultScanner(keptBytes);
  for await (const chunk of chunks) {
    if (!scanner.push(chunk)) return { ok: false };
  }
  return scanner.end();
}
