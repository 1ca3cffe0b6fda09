import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  formatOutput,
  formatSize,
  NO_OUTPUT_TEXT,
  truncateTail,
  truncationNotice,
  utf8ByteLength,
} from "../src/index.js";
import { portableUtf8ByteLength } from "../src/truncate.js";

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const isWellFormed = (s: string) => !LONE_SURROGATE.test(s);
const bytes = (s: string) => new TextEncoder().encode(s).length;

/** Straightforward split-based tail truncation, the behaviour truncateTail must match. */
function naiveTruncateTail(text: string, maxBytes: number, maxLines: number) {
  const lines = text.split("\n");
  const totalBytes = bytes(text);
  if (lines.length <= maxLines && totalBytes <= maxBytes) return { text, truncated: false };
  const kept: string[] = [];
  let used = 0;
  for (let i = lines.length - 1; i >= 0 && kept.length < maxLines; i--) {
    const line = lines[i] ?? "";
    const size = bytes(line) + (kept.length > 0 ? 1 : 0);
    if (used + size > maxBytes) {
      // A final newline's empty "line" does not count: the line it ends is cut instead.
      const afterNewline = kept.length === 1 && kept[0] === "" && maxBytes >= 1;
      if (kept.length === 0 || afterNewline) {
        const room = maxBytes - (afterNewline ? 1 : 0);
        const chars = Array.from(line);
        let tail = "";
        for (let j = chars.length - 1; j >= 0; j--) {
          const next = chars[j] + tail;
          if (bytes(next) > room) break;
          tail = next;
        }
        return { text: afterNewline ? `${tail}\n` : tail, truncated: true };
      }
      break;
    }
    kept.unshift(line);
    used += size;
  }
  return { text: kept.join("\n"), truncated: true };
}

const textArb = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 300 }),
  fc
    .array(fc.constantFrom("a", "é", "中", "😀", "\n", "xyz\n", "\n\n", "日本語"), {
      maxLength: 200,
    })
    .map((parts) => parts.join("")),
);

/** Text, maxBytes and maxLines small enough that every limit is hit often. */
const truncationCase = [
  textArb,
  fc.integer({ min: 0, max: 64 }),
  fc.integer({ min: 1, max: 12 }),
] as const;

describe("truncateTail", () => {
  it("returns short text unchanged", () => {
    const result = truncateTail("hello\nworld\n");
    expect(result).toMatchObject({
      text: "hello\nworld\n",
      truncated: false,
      truncatedBy: null,
      totalLines: 3,
      totalBytes: 12,
    });
  });

  it("keeps the last maxLines lines", () => {
    const text = Array.from({ length: 10 }, (_, i) => `line ${i}`).join("\n");
    const result = truncateTail(text, { maxLines: 3 });
    expect(result.text).toBe("line 7\nline 8\nline 9");
    expect(result).toMatchObject({
      truncated: true,
      truncatedBy: "lines",
      keptLines: 3,
      totalLines: 10,
    });
  });

  it("keeps whole lines within maxBytes", () => {
    const result = truncateTail("aaaa\nbbbb\ncccc", { maxBytes: 10 });
    expect(result.text).toBe("bbbb\ncccc");
    expect(result).toMatchObject({ truncatedBy: "bytes", keptBytes: 9, lastLinePartial: false });
  });

  it("cuts one oversized last line on a character boundary", () => {
    const result = truncateTail(`start\n${"中".repeat(10)}`, { maxBytes: 10 });
    expect(result.text).toBe("中中中");
    expect(result).toMatchObject({ lastLinePartial: true, keptBytes: 9, truncatedBy: "bytes" });
  });

  it("never splits a surrogate pair", () => {
    const result = truncateTail("😀😀😀", { maxBytes: 7 });
    expect(result.text).toBe("😀");
    expect(result.keptBytes).toBe(4);
  });

  it("counts bytes like TextEncoder, lone surrogates included, with and without Buffer", () => {
    for (const s of ["", "abc", "é", "中文", "😀", "\ud800", "a\udc00b", "\ud83d\ude00x"]) {
      expect(utf8ByteLength(s)).toBe(bytes(s));
      expect(portableUtf8ByteLength(s)).toBe(bytes(s));
    }
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), fc.nat(), fc.nat(), (s, a, b) => {
        const [start, end] = [Math.min(a, b) % (s.length + 1), Math.max(a, b) % (s.length + 1)];
        const [from, to] = [Math.min(start, end), Math.max(start, end)];
        const expected = bytes(s.slice(from, to));
        expect(utf8ByteLength(s, from, to)).toBe(expected);
        expect(portableUtf8ByteLength(s, from, to)).toBe(expected);
      }),
      { numRuns: 1000 },
    );
  });

  it("refuses nonsensical limits", () => {
    expect(() => truncateTail("x", { maxLines: 0 })).toThrow(RangeError);
    expect(() => truncateTail("x", { maxBytes: -1 })).toThrow(RangeError);
  });

  it("matches the split-based reference on arbitrary text", () => {
    fc.assert(
      fc.property(...truncationCase, (text, maxBytes, maxLines) => {
        const result = truncateTail(text, { maxBytes, maxLines });
        const expected = naiveTruncateTail(text, maxBytes, maxLines);
        expect(result.text).toBe(expected.text);
        expect(result.truncated).toBe(expected.truncated);
      }),
      { numRuns: 2000 },
    );
  });

  it("keeps a suffix within the limits, with exact counts and no broken characters", () => {
    fc.assert(
      fc.property(...truncationCase, (text, maxBytes, maxLines) => {
        const result = truncateTail(text, { maxBytes, maxLines });
        expect(text.endsWith(result.text)).toBe(true);
        expect(result.keptBytes).toBe(bytes(result.text));
        expect(result.totalBytes).toBe(bytes(text));
        expect(result.totalLines).toBe(text.split("\n").length);
        if (result.truncated) {
          expect(result.keptBytes).toBeLessThanOrEqual(maxBytes);
          expect(result.keptLines).toBeLessThanOrEqual(maxLines);
        }
        if (isWellFormed(text)) expect(isWellFormed(result.text)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("formatSize and the notice", () => {
  it("formats like the reference", () => {
    expect(formatSize(0)).toBe("0B");
    expect(formatSize(1023)).toBe("1023B");
    expect(formatSize(1024)).toBe("1.0KB");
    expect(formatSize(51_200)).toBe("50.0KB");
    expect(formatSize(12_595)).toBe("12.3KB");
    expect(formatSize(4.1 * 1024 * 1024)).toBe("4.1MB");
  });

  it("says what was kept and what to do", () => {
    expect(truncationNotice(12_595, 4.1 * 1024 * 1024, "50.0KB limit")).toBe(
      "[Showing the last 12.3KB of 4.1MB (50.0KB limit). Have the command summarise or filter its own output.]",
    );
  });
});

describe("formatOutput", () => {
  it("joins stdout and stderr with one newline only when both are non-empty", () => {
    expect(formatOutput({ stdout: "out\n", stderr: "err\n" }).text).toBe("out\n\nerr\n");
    expect(formatOutput({ stdout: "out", stderr: "" }).text).toBe("out");
    expect(formatOutput({ stdout: "", stderr: "err" }).text).toBe("err");
  });

  it("shows (no output) when both are empty", () => {
    expect(formatOutput({ stdout: "", stderr: "" })).toEqual({
      text: NO_OUTPUT_TEXT,
      truncated: false,
    });
  });

  it("keeps the tail and appends the notice naming the limit that cut it: lines", () => {
    const stdout = Array.from({ length: 5000 }, (_, i) => `line ${i}`).join("\n");
    const { text, truncated } = formatOutput({ stdout, stderr: "" });
    const tail = truncateTail(stdout);
    expect(tail.truncatedBy).toBe("lines");
    expect(truncated).toBe(true);
    expect(text).toBe(
      `${tail.text}\n\n${truncationNotice(tail.keptBytes, tail.totalBytes, "2000-line limit")}`,
    );
  });

  it("names the byte limit when bytes cut the output", () => {
    const stdout = Array.from({ length: 1000 }, (_, i) => `${i} ${"x".repeat(100)}`).join("\n");
    const { text } = formatOutput({ stdout, stderr: "" });
    expect(truncateTail(stdout).truncatedBy).toBe("bytes");
    expect(text).toMatch(/ \(50\.0KB limit\)\. Have the command/);
  });

  it("shows the end of one long line that ends in a newline, not (no output)", () => {
    const stdout = `${"a".repeat(200_000)}b\n`;
    const tail = truncateTail(stdout, { maxBytes: 1000 });
    expect(tail.text).toBe(`${"a".repeat(998)}b\n`);
    expect(tail.keptBytes).toBe(1000);
    expect(tail.lastLinePartial).toBe(true);
    const { text } = formatOutput({ stdout, stderr: "" });
    expect(text.startsWith(`${"a".repeat(51_198)}b\n\n\n[Showing the last 50.0KB of 195.3KB`)).toBe(
      true,
    );
  });

  it("reports the true total when the bridge retained only a tail", () => {
    const { text, truncated } = formatOutput({
      stdout: "last\n",
      stderr: "",
      stdoutBytes: 5_000_000,
    });
    expect(truncated).toBe(true);
    expect(text).toBe(`last\n\n\n${truncationNotice(5, 5_000_000, "50.0KB limit")}`);
  });
});
