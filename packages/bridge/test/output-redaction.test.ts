import { randomBytes } from "node:crypto";
import { concatBytes } from "@remote-task/internal";
import { execResultSchema } from "@remote-task/protocol";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import type { OutputChunk } from "../src/backend.js";
import { createBridge } from "../src/index.js";
import { redactOutput } from "../src/output-redaction.js";
import { createFakeBackend } from "../src/testing/index.js";
import { events, request, TOKEN, trackBridge } from "./helpers.js";

const decoder = new TextDecoder();

async function* chunksOf(list: OutputChunk[]): AsyncGenerator<OutputChunk> {
  yield* list;
}

/** What each stream carried once `chunks` went through redaction. */
async function redacted(
  chunks: OutputChunk[],
  hidden: Array<{ value: string; placeholder: string }>,
): Promise<Record<"stdout" | "stderr", string>> {
  const out: Record<"stdout" | "stderr", Uint8Array[]> = { stdout: [], stderr: [] };
  for await (const chunk of redactOutput(chunksOf(chunks), hidden)) {
    out[chunk.stream].push(chunk.data as Uint8Array);
  }
  return {
    stdout: decoder.decode(concatBytes(out.stdout)),
    stderr: decoder.decode(concatBytes(out.stderr)),
  };
}

/** `text` cut at `cuts` (positions, any order), as chunks of `stream`. */
function cut(text: string, cuts: number[], stream: "stdout" | "stderr"): OutputChunk[] {
  const bytes = new TextEncoder().encode(text);
  const at = [...new Set(cuts.map((c) => c % (bytes.byteLength + 1)))].sort((a, b) => a - b);
  const bounds = [0, ...at, bytes.byteLength];
  return bounds.slice(1).map((end, i) => ({ stream, data: bytes.slice(bounds[i], end) }));
}

describe("redactOutput", () => {
  it("replaces every value by its placeholder wherever the chunks are cut, and loses nothing else", async () => {
    const hidden = [
      { value: "ghp_SECRETvalue42", placeholder: "rt_secret_aaaa" },
      { value: "sk-é-ünïcode", placeholder: "rt_secret_bbbb" },
    ];
    // Text made of the values, pieces of them and other characters.
    const piece = fc.constantFrom(
      "ghp_",
      "SECRET",
      "ghp_SECRETvalue42",
      "sk-é-",
      "ünïcode",
      "sk-é-ünïcode",
      "x",
      "é",
      "\n",
      "ghp_SECRETvalue4",
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(piece, { maxLength: 30 }),
        fc.array(piece, { maxLength: 30 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        async (outPieces, errPieces, outCuts, errCuts) => {
          const stdout = outPieces.join("");
          const stderr = errPieces.join("");
          const outChunks = cut(stdout, outCuts, "stdout");
          const errChunks = cut(stderr, errCuts, "stderr");
          // The two streams interleaved, as a backend gives them.
          const chunks = outChunks.flatMap((chunk, i) => [chunk, ...errChunks.slice(i, i + 1)]);
          chunks.push(...errChunks.slice(outChunks.length));
          const expected = (text: string) =>
            hidden.reduce((t, { value, placeholder }) => t.split(value).join(placeholder), text);
          const got = await redacted(chunks, hidden);
          expect(got.stdout).toBe(expected(stdout));
          expect(got.stderr).toBe(expected(stderr));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("passes output through unchanged and undelayed when nothing could begin a value", async () => {
    const source = chunksOf([{ stream: "stdout", data: "plain text\n" }]);
    const iterator = redactOutput(source, [{ value: "zzz-secret", placeholder: "p" }])[
      Symbol.asyncIterator
    ]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    expect(decoder.decode(first.value?.data as Uint8Array)).toBe("plain text\n");
  });

  it("returns at once to the backend's output, even with a next() pending", async () => {
    let returned = false;
    const pending: AsyncIterable<OutputChunk> = {
      [Symbol.asyncIterator]: () => ({
        next: () => new Promise(() => {}),
        return: async () => {
          returned = true;
          return { done: true, value: undefined };
        },
      }),
    };
    const iterator = redactOutput(pending, [{ value: "v-secret", placeholder: "p" }])[
      Symbol.asyncIterator
    ]();
    void iterator.next();
    await iterator.return?.();
    expect(returned).toBe(true);
  });
});

const VALUE = `ghp_${randomBytes(12).toString("hex")}`;
const VAR = `RT_REDACT_OUTPUT_${process.pid}`;

afterEach(() => {
  delete process.env[VAR];
});

/** A bridge whose fake backend prints the secret's value (an upstream echoing it), split. */
function echoingBridge() {
  process.env[VAR] = VALUE;
  const fake = createFakeBackend({
    networkModes: ["none", "allow"],
    script: (spec) => ({
      chunks: [
        { data: `body: {"token":"${VALUE.slice(0, 7)}` },
        { data: `${VALUE.slice(7)}"}\n` },
        { stream: "stderr", data: `${VALUE}\n` },
        { data: `env: ${spec.env.GH_TOKEN}\n` },
      ],
    }),
  });
  const bridge = createBridge({
    backend: Object.assign(Object.create(fake), { injectsSecrets: true }),
    token: TOKEN,
    secrets: { GH_TOKEN: { from: { env: VAR }, hosts: ["api.github.com"] } },
  });
  trackBridge(bridge);
  return bridge;
}

describe("a call's output", () => {
  it("shows the placeholder where the command printed a secret's value: buffered answer", async () => {
    const response = await echoingBridge()(
      request("/exec", {
        method: "POST",
        body: { sandboxId: "r1", command: "x", secrets: ["GH_TOKEN"] },
      }),
    );
    const text = await response.text();
    expect(text).not.toContain(VALUE);
    const result = execResultSchema.parse(JSON.parse(text));
    const placeholder = /env: (rt_secret_[0-9a-f]{32})/.exec(result.stdout)?.[1];
    expect(result.stdout).toBe(`body: {"token":"${placeholder}"}\nenv: ${placeholder}\n`);
    expect(result.stderr).toBe(`${placeholder}\n`);
    expect(result.stdoutBytes).toBe(new TextEncoder().encode(result.stdout).byteLength);
  });

  it("shows the placeholder where the command printed a secret's value: streamed", async () => {
    const response = await echoingBridge()(
      request("/exec", {
        method: "POST",
        body: { sandboxId: "r2", command: "x", secrets: ["GH_TOKEN"] },
        stream: true,
      }),
    );
    const all = JSON.stringify(await events(response).all());
    expect(all).not.toContain(VALUE);
    expect(all).toContain("rt_secret_");
  });
});
