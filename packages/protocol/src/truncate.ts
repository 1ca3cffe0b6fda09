import { DISPLAY_MAX_BYTES, DISPLAY_MAX_LINES } from "./constants.js";

export interface TruncateOptions {
  /** Most UTF-8 bytes to keep (default 51200). */
  maxBytes?: number | undefined;
  /** Most lines to keep (default 2000). */
  maxLines?: number | undefined;
}

export interface TruncateResult {
  /** The kept tail: whole lines, or the end of one oversized last line. */
  text: string;
  truncated: boolean;
  /** Which limit cut the text, or `null` when nothing was cut. */
  truncatedBy: "bytes" | "lines" | null;
  totalBytes: number;
  totalLines: number;
  keptBytes: number;
  keptLines: number;
  /**
   * True when even the last line alone (with its final newline, if any) exceeded `maxBytes` and
   * its end was kept, cut on a UTF-8 boundary.
   */
  lastLinePartial: boolean;
}

type ByteLength = (text: string, encoding: "utf8") => number;
/** Node's native UTF-8 length (also in Workers with `nodejs_compat`), several times faster. */
const nativeByteLength = (globalThis as { Buffer?: { byteLength?: ByteLength } }).Buffer
  ?.byteLength;

/** UTF-8 length of `text.slice(start, end)` without encoding it; lone surrogates count as U+FFFD. */
export function utf8ByteLength(text: string, start = 0, end = text.length): number {
  if (nativeByteLength !== undefined) {
    const part = start === 0 && end === text.length ? text : text.slice(start, end);
    return nativeByteLength(part, "utf8");
  }
  return portableUtf8ByteLength(text, start, end);
}

/** The same count in plain JavaScript, for runtimes without `Buffer`. */
export function portableUtf8ByteLength(text: string, start = 0, end = text.length): number {
  let bytes = 0;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < end && isLowSurrogate(text.charCodeAt(i + 1))) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}

/** Start index of the longest suffix of `text.slice(start, end)` that fits in `maxBytes`. */
function suffixStartWithin(text: string, start: number, end: number, maxBytes: number): number {
  let bytes = 0;
  let i = end;
  while (i > start) {
    const c = text.charCodeAt(i - 1);
    let width = 1;
    let size = 1;
    if (c >= 0x80 && c < 0x800) size = 2;
    else if (isLowSurrogate(c) && i - 2 >= start) {
      const h = text.charCodeAt(i - 2);
      if (h >= 0xd800 && h <= 0xdbff) {
        width = 2;
        size = 4;
      } else size = 3;
    } else if (c >= 0x800) size = 3;
    if (bytes + size > maxBytes) break;
    bytes += size;
    i -= width;
  }
  return i;
}

function countLines(text: string): number {
  let lines = 1;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) lines++;
  return lines;
}

/**
 * Keeps the end of `text`: at most `maxLines` whole lines and `maxBytes` UTF-8 bytes, whichever
 * limit is hit first. Lines are what `text.split("\n")` gives. When the last line alone is too
 * large, its end is kept, cut on a character boundary, so no character is ever broken; a final
 * newline does not count as that line (40 MB of `a` then `\n` keeps the end of the `a`s).
 */
export function truncateTail(text: string, options: TruncateOptions = {}): TruncateResult {
  const maxBytes = options.maxBytes ?? DISPLAY_MAX_BYTES;
  const maxLines = options.maxLines ?? DISPLAY_MAX_LINES;
  if (!(maxBytes >= 0) || !(maxLines >= 1)) {
    throw new RangeError("truncateTail needs maxBytes >= 0 and maxLines >= 1");
  }
  const totalBytes = utf8ByteLength(text);
  const totalLines = countLines(text);
  if (totalBytes <= maxBytes && totalLines <= maxLines) {
    return {
      text,
      truncated: false,
      truncatedBy: null,
      totalBytes,
      totalLines,
      keptBytes: totalBytes,
      keptLines: totalLines,
      lastLinePartial: false,
    };
  }

  let keptBytes = 0;
  let keptLines = 0;
  let keptStart = text.length;
  let truncatedBy: "bytes" | "lines" = "lines";
  let lastLinePartial = false;
  let end = text.length;
  while (keptLines < maxLines) {
    const start = text.lastIndexOf("\n", end - 1) + 1;
    const lineBytes = utf8ByteLength(text, start, end) + (keptLines > 0 ? 1 : 0);
    if (keptBytes + lineBytes > maxBytes) {
      truncatedBy = "bytes";
      // Only the empty "line" after a final newline kept so far: the long line it ends is the
      // output's real last line, so keep its end rather than nothing.
      const afterNewline = keptLines === 1 && keptStart === text.length && maxBytes >= 1;
      if (keptLines === 0 || afterNewline) {
        keptStart = suffixStartWithin(text, start, end, maxBytes - (afterNewline ? 1 : 0));
        keptBytes = utf8ByteLength(text, keptStart, text.length);
        keptLines += 1;
        lastLinePartial = true;
      }
      break;
    }
    keptBytes += lineBytes;
    keptLines++;
    keptStart = start;
    if (start === 0) break;
    end = start - 1;
  }
  return {
    text: text.slice(keptStart),
    truncated: true,
    truncatedBy,
    totalBytes,
    totalLines,
    keptBytes,
    keptLines,
    lastLinePartial,
  };
}

/** `512B`, `50.0KB`, `4.1MB`: the size style used in truncation notices. */
export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes}B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)}KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)}MB`;
}

/**
 * The notice appended to tail-truncated output; `limit` names the limit that cut it, e.g.
 * `50.0KB limit` or `2000-line limit`.
 */
export function truncationNotice(keptBytes: number, totalBytes: number, limit: string): string {
  return `[Showing the last ${formatSize(keptBytes)} of ${formatSize(totalBytes)} (${limit}). Have the command summarise or filter its own output.]`;
}

/** Text shown when a command printed nothing. */
export const NO_OUTPUT_TEXT = "(no output)";

export interface OutputLike {
  stdout: string;
  stderr: string;
  /** Total bytes written, when the retained `stdout` may be only its tail. */
  stdoutBytes?: number | undefined;
  stderrBytes?: number | undefined;
}

export interface FormattedOutput {
  text: string;
  truncated: boolean;
}

/**
 * The agent's view of a result: stdout, a newline, stderr (the newline only when both are
 * non-empty); the tail kept within the display limits with a notice; `(no output)` when empty.
 */
export function formatOutput(result: OutputLike, options: TruncateOptions = {}): FormattedOutput {
  const { stdout, stderr } = result;
  const joined = stdout && stderr ? `${stdout}\n${stderr}` : stdout || stderr;
  const stdoutTotal = result.stdoutBytes ?? utf8ByteLength(stdout);
  const stderrTotal = result.stderrBytes ?? utf8ByteLength(stderr);
  if (!joined && stdoutTotal + stderrTotal === 0) return { text: NO_OUTPUT_TEXT, truncated: false };
  const cut = truncateTail(joined, options);
  const fullBytes = stdoutTotal + stderrTotal + (stdoutTotal > 0 && stderrTotal > 0 ? 1 : 0);
  const totalBytes = Math.max(cut.totalBytes, fullBytes);
  if (!cut.truncated && totalBytes === cut.totalBytes) return { text: joined, truncated: false };
  // Cut here by the line limit, or by bytes: the display limit, or before (a bridge kept a tail).
  const limit =
    cut.truncatedBy === "lines"
      ? `${options.maxLines ?? DISPLAY_MAX_LINES}-line limit`
      : `${formatSize(options.maxBytes ?? DISPLAY_MAX_BYTES)} limit`;
  const kept = cut.text || NO_OUTPUT_TEXT;
  return {
    text: `${kept}\n\n${truncationNotice(cut.keptBytes, totalBytes, limit)}`,
    truncated: true,
  };
}
