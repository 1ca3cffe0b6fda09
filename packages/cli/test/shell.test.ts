import { execFileSync } from "node:child_process";
import fc from "fast-check";
import { expect, it } from "vitest";
import { commandFromWords, shellQuote } from "../src/shell.js";

/** The argv a POSIX shell builds from a command line (`printf` shows one argument per line). */
function argvOf(commandLine: string): string[] {
  const out = execFileSync("sh", [
    "-c",
    `set -- ${commandLine}; for a; do printf '%s\\0' "$a"; done`,
  ]);
  return out.toString("utf8").split("\0").slice(0, -1);
}

it("leaves plain words alone and single-quotes the rest", () => {
  expect(shellQuote("ls")).toBe("ls");
  expect(shellQuote("a   b")).toBe("'a   b'");
  expect(shellQuote("it's")).toBe("'it'\\''s'");
  expect(shellQuote("")).toBe("''");
});

it("keeps one word as a whole command line and every word of several", () => {
  expect(commandFromWords(["ls | wc -l"])).toBe("ls | wc -l");
  expect(commandFromWords(["sh", "-c", "exit 7"])).toBe("sh -c 'exit 7'");
});

it("round-trips any argv through a real shell", () => {
  const word = fc
    .string({ unit: "grapheme", minLength: 0, maxLength: 12 })
    .filter((w) => !w.includes("\0"));
  fc.assert(
    fc.property(fc.array(word, { minLength: 2, maxLength: 5 }), (words) => {
      expect(argvOf(commandFromWords(words))).toEqual(words);
    }),
    { numRuns: 100 },
  );
});
