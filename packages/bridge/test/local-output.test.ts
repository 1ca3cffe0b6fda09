import { once } from "node:events";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import type { OutputChunk } from "../src/backend.js";
import { mergeOutput } from "../src/local/output.js";

async function all(output: AsyncIterable<OutputChunk>): Promise<string[]> {
  const seen: string[] = [];
  for await (const chunk of output) seen.push(`${chunk.stream}:${String(chunk.data)}`);
  return seen;
}

describe("mergeOutput (local backend)", () => {
  it("ends for pipes that were already over before anyone listened", async () => {
    const [stdout, stderr] = [new PassThrough(), new PassThrough()];
    for (const pipe of [stdout, stderr]) {
      pipe.end();
      pipe.resume();
      await once(pipe, "end");
    }
    expect(await all(mergeOutput(stdout, stderr))).toEqual([]);
  });

  it("keeps output written before anyone listened, then adds the epilogue", async () => {
    const [stdout, stderr] = [new PassThrough(), new PassThrough()];
    stdout.end("out");
    stderr.end("err");
    const seen = await all(
      mergeOutput(stdout, stderr, async () => [{ stream: "stderr", data: "note" }]),
    );
    expect([...seen].sort()).toEqual(["stderr:err", "stderr:note", "stdout:out"]);
    expect(seen.at(-1)).toBe("stderr:note");
  });
});
