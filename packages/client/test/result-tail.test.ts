import { execResultSchema, utf8ByteLength } from "@remote-task/protocol";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { readResultTail } from "../src/result-tail.js";
import { byteTail, fullResult } from "./helpers/fixtures.js";

const encoder = new TextEncoder();

/** `bytes` cut into chunks at the given offsets (anywhere, mid-character included). */
function cut(bytes: Uint8Array, cuts: number[] = []): Uint8Array[] {
  const offsets = [...new Set(cuts.map((c) => c % (bytes.byteLength + 1)))].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let start = 0;
  for (const offset of [...offsets, bytes.byteLength]) {
    chunks.push(bytes.subarray(start, offset));
    start = offset;
  }
  return chunks;
}

async function* from(chunks: Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* chunks;
}

async function read(text: string, keptBytes: number, cuts: number[] = []) {
  return readResultTail(from(cut(encoder.encode(text), cuts)), keptBytes);
}

/** What the tail reader must give for an answer whose outputs are `stdout` and `stderr`. */
function expected(answer: Record<string, unknown>, keptBytes: number) {
  const result: Record<string, unknown> = { ...answer };
  for (const output of ["stdout", "stderr"] as const) {
    const text = answer[output] as string;
    const total = utf8ByteLength(text);
    result[output] = byteTail(text, keptBytes);
    result[`${output}Bytes`] ??= total;
    if (total > keptBytes) result[`${output}Truncated`] = true;
  }
  return result;
}

/** Output text with what JSON escapes (quotes, backslashes, controls) and what UTF-8 widens. */
const outputText = fc
  .array(
    fc.oneof(
      fc.string({ unit: "grapheme", maxLength: 40 }),
      fc.constantFrom('"', "\\", "\n", "\t", "\u0000", "\u001f", "é", "中", "😀", "\ud800", "/"),
    ),
    { maxLength: 60 },
  )
  .map((parts) => parts.join(""));

describe("readResultTail", () => {
  it("keeps the byte tail of each output and their exact totals, wherever the chunks are cut", async () => {
    await fc.assert(
      fc.asyncProperty(
        outputText,
        outputText,
        fc.integer({ min: -5, max: 300 }),
        fc.integer({ min: 0, max: 200 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        async (stdout, stderr, code, keptBytes, cuts) => {
          const answer = { stdout, stderr, code };
          const parsed = await read(JSON.stringify(answer), keptBytes, cuts);
          expect(parsed).toEqual({ ok: true, value: expected(answer, keptBytes) });
        },
      ),
      { numRuns: 300 },
    );
  });

  it("gives what JSON.parse gives (byte totals added) when the outputs fit", async () => {
    const text = JSON.stringify(fullResult, null, 2);
    const parsed = await read(text, 1024 * 1024, [1, 7, 30, 31]);
    expect(parsed).toEqual({ ok: true, value: JSON.parse(text) });
    expect(execResultSchema.parse(JSON.parse(text))).toEqual(fullResult);
  });

  it("keeps the totals and flags a bridge declared when it kept only a tail itself", async () => {
    const answer = {
      stdout: "x".repeat(500),
      stderr: "",
      code: 0,
      stdoutBytes: 9_000_000,
      stdoutTruncated: true,
    };
    const parsed = await read(JSON.stringify(answer), 100);
    expect(parsed).toEqual({
      ok: true,
      value: { ...answer, stdout: "x".repeat(100), stderrBytes: 0 },
    });
  });

  it("skips fields the protocol does not know, however large or nested", async () => {
    const text = `{"debug":{"a":[1,{"stdout":"no"}],"b":"${"z".repeat(100_000)}"},"code":3,"stdout":"out","extra":${"9".repeat(5000)},"stderr":"err","list":["stdout"]}`;
    expect(await read(text, 64)).toEqual({
      ok: true,
      value: { code: 3, stdout: "out", stdoutBytes: 3, stderr: "err", stderrBytes: 3 },
    });
  });

  it("reads a field of the wrong kind so that the protocol check names it", async () => {
    const text = `{"stdout":["a"],"stderr":"","code":"${"1".repeat(5000)}","outcome":{"x":1}}`;
    const parsed = await read(text, 64);
    expect(parsed).toEqual({
      ok: true,
      value: { stdout: [], stderr: "", stderrBytes: 0, code: null, outcome: {} },
    });
    const checked = execResultSchema.safeParse(parsed.ok ? parsed.value : undefined);
    expect(checked.success).toBe(false);
    expect(checked.error?.issues.map((issue) => issue.path)).toEqual([
      ["stdout"],
      ["code"],
      ["outcome"],
    ]);
  });

  it("lets the last of a repeated field win, as JSON.parse does", async () => {
    const text = '{"stdout":"first","stdout":"second","stderr":1,"stderr":"e","code":1,"code":2}';
    expect(await read(text, 64)).toEqual({
      ok: true,
      value: { ...JSON.parse(text), stdoutBytes: 6, stderrBytes: 1 },
    });
  });

  it("reads an answer that is not an object as null", async () => {
    for (const text of ['"text"', "[1,2]", "42", "null"]) {
      expect(await read(text, 64)).toEqual({ ok: true, value: null });
    }
  });

  it("is not JSON: garbage, a cut-off answer, anything after the value", async () => {
    for (const text of ["aaaa", '{"stdout":"cut', '{"code":1', '{"code":1}x', "", "{} {}"]) {
      expect(await read(text, 64), text).toEqual({ ok: false });
    }
  });

  it("accepts one huge chunk and a byte-order mark, as JSON.parse of the decoded text does", async () => {
    const stdout = "line\n".repeat(60_000);
    const text = `\ufeff${JSON.stringify({ stdout, stderr: "", code: 0 })}`;
    expect(await read(text, 1000)).toEqual({
      ok: true,
      value: expected({ stdout, stderr: "", code: 0 }, 1000),
    });
  });

  it("passes on a failure of the body itself", async () => {
    async function* broken(): AsyncGenerator<Uint8Array> {
      yield encoder.encode('{"stdout":"');
      throw new Error("socket hang up");
    }
    await expect(readResultTail(broken(), 64)).rejects.toThrow("socket hang up");
  });
});

describe("the scanner checks JSON as JSON.parse does", () => {
  const decoder = new TextDecoder();
  /** Whether JSON.parse accepts the bytes, decoded as the client decodes a body it holds. */
  const parses = (bytes: Uint8Array) => {
    try {
      JSON.parse(decoder.decode(bytes));
      return true;
    } catch {
      return false;
    }
  };
  const scan = (bytes: Uint8Array, cuts: number[]) =>
    readResultTail(from(cut(bytes, cuts)), 1 << 20);
  /** Any JSON text: values of every kind, with and without white space between tokens. */
  const jsonText = fc
    .tuple(fc.jsonValue({ maxDepth: 4 }), fc.constantFrom(undefined, 1, "\t", " \n"))
    .map(([value, space]) => JSON.stringify(value, null, space));

  it("accepts what JSON.parse accepts, and reads objects as JSON.parse does", async () => {
    await fc.assert(
      fc.asyncProperty(jsonText, fc.array(fc.nat(), { maxLength: 6 }), async (text, cuts) => {
        const parsed = await scan(encoder.encode(text), cuts);
        expect(parsed.ok).toBe(true);
        const value = JSON.parse(text);
        if (value === null || typeof value !== "object" || Array.isArray(value)) {
          expect(parsed).toEqual({ ok: true, value: null });
        }
      }),
      { numRuns: 500 },
    );
  });

  it("refuses what JSON.parse refuses: any byte inserted, removed or replaced", async () => {
    const mutation = fc.record({
      at: fc.nat(),
      kind: fc.constantFrom("insert", "remove", "replace"),
      byte: fc.oneof(
        fc.integer({ min: 0, max: 255 }),
        fc.constantFrom(...Array.from('{}[]:,"\\-+.eE0123456789 tfnrule', (c) => c.charCodeAt(0))),
      ),
    });
    await fc.assert(
      fc.asyncProperty(
        jsonText,
        fc.array(mutation, { minLength: 1, maxLength: 3 }),
        fc.array(fc.nat(), { maxLength: 4 }),
        async (text, mutations, cuts) => {
          const bytes = [...encoder.encode(text)];
          for (const { at, kind, byte } of mutations) {
            const index = at % (bytes.length + 1);
            if (kind === "insert") bytes.splice(index, 0, byte);
            else if (kind === "remove") bytes.splice(index, 1);
            else bytes.splice(index, 1, byte);
          }
          const mutated = new Uint8Array(bytes);
          expect((await scan(mutated, cuts)).ok).toBe(parses(mutated));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("agrees with JSON.parse on hand-picked edge cases", async () => {
    const cases = [
      "0",
      "-0",
      "01",
      "-",
      "1.",
      ".5",
      "1e",
      "1e+",
      "1E-2",
      "2.5e10",
      "-12.0e+3",
      "1 2",
      "true",
      "tru",
      "truex",
      "nul",
      "null ",
      " false",
      "[]",
      "[,]",
      "[1,]",
      "{}",
      '{"a"}',
      '{"a":}',
      '{"a":1,}',
      '{,"a":1}',
      '{"a" 1}',
      '{"a":1 "b":2}',
      "[1 2]",
      "[[[]]]",
      "[}",
      '"\\u12"',
      '"\\u12G4"',
      '"\\x"',
      '"a\tb"',
      '"\\ud83d\\ude00"',
      '"\\ud800"',
      '"\\udc00x"',
      "\ufeff{}",
      "\ufeff\ufeff{}",
      " \ufeff{}",
      "{}\u0000",
      '{"a":1}}',
      "]",
      "",
    ];
    for (const text of cases) {
      const bytes = encoder.encode(text);
      expect((await scan(bytes, [])).ok, JSON.stringify(text)).toBe(parses(bytes));
    }
  });

  it("refuses nesting deeper than 1024 levels", async () => {
    const deep = (n: number) => encoder.encode(`${"[".repeat(n)}${"]".repeat(n)}`);
    expect((await scan(deep(1024), [])).ok).toBe(true);
    expect((await scan(deep(1025), [])).ok).toBe(false);
  });
});
