import type { StreamEvent } from "@remote-task/protocol";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { createBridge, DEFAULT_STREAM_BUFFER_BYTES } from "../src/index.js";
import { framePieces } from "../src/sse.js";
import { createFakeBackend } from "../src/testing/index.js";
import { events, eventually, setupBridge, shutdownBridges } from "./helpers.js";

afterEach(shutdownBridges);

const KiB = 1024;
const CHUNK = 64 * KiB;
const encoder = new TextEncoder();

type Output = Extract<StreamEvent, { type: "stdout" | "stderr" }>;

function outputOf(all: StreamEvent[], stream: "stdout" | "stderr" = "stdout"): Output[] {
  return all.filter((event): event is Output => event.type === stream);
}

function bytesOf(output: Output[]): { data: number; skipped: number } {
  return {
    data: output.reduce((sum, event) => sum + encoder.encode(event.data).byteLength, 0),
    skipped: output.reduce((sum, event) => sum + (event.skippedBytes ?? 0), 0),
  };
}

describe("a streamed call whose reader does not keep up", () => {
  it("queues at most the buffer for a reader that does not read, skips the rest, counts it and keeps it in the result", async () => {
    const total = 32 * CHUNK;
    const { exec, logger } = setupBridge(
      { limits: { maxOutputBytes: 4 * 1024 * KiB } },
      { script: () => ({ repeat: { chunk: { data: "x".repeat(CHUNK) }, times: 32 } }) },
    );
    const response = await exec({ command: "x" }, { stream: true });
    // The call runs to its end while nobody reads.
    await eventually(() => logger.entries.length === 1, "the call's log line");
    const all = await events(response).all();
    const output = outputOf(all);
    const { data, skipped } = bytesOf(output);
    expect(data).toBeLessThanOrEqual(DEFAULT_STREAM_BUFFER_BYTES + CHUNK);
    expect(skipped).toBeGreaterThan(0);
    expect(data + skipped).toBe(total);
    // The gap is reported once the output ended, in an event of its own.
    expect(output.at(-1)).toEqual({ type: "stdout", data: "", skippedBytes: skipped });
    expect(all.filter((event) => event.type === "heartbeat")).toEqual([]);
    const exit = all.at(-1);
    expect(exit?.type).toBe("exit");
    if (exit?.type !== "exit") return;
    expect(exit.result).toMatchObject({ stdoutBytes: total, stdoutTruncated: false, code: 0 });
    expect(exit.result.stdout).toBe("x".repeat(total));
  });

  it("sets the buffer with streamBufferBytes, and refuses one that is not a positive whole number", async () => {
    const { exec, logger } = setupBridge(
      { streamBufferBytes: 16 * KiB },
      { script: () => ({ repeat: { chunk: { data: "y".repeat(4 * KiB) }, times: 64 } }) },
    );
    const response = await exec({ command: "x" }, { stream: true });
    await eventually(() => logger.entries.length === 1, "the call's log line");
    const { data, skipped } = bytesOf(outputOf(await events(response).all()));
    expect(data).toBeLessThanOrEqual(16 * KiB + 4 * KiB);
    expect(data + skipped).toBe(256 * KiB);
    const backend = createFakeBackend();
    for (const streamBufferBytes of [0, -1, 1.5, Number.NaN]) {
      expect(() => createBridge({ backend, streamBufferBytes }), `${streamBufferBytes}`).toThrow(
        TypeError,
      );
    }
  });

  it("forwards again once the reader catches up, saying on the next event how much it missed", async () => {
    const { exec, backend } = setupBridge(
      { limits: { maxOutputBytes: 4 * 1024 * KiB } },
      {
        script: () => ({
          chunks: [
            ...Array.from({ length: 16 }, () => ({ data: "a".repeat(CHUNK) })),
            { stream: "stderr" as const, data: "err\n" },
            { data: "after\n", delayMs: 300 },
          ],
        }),
      },
    );
    const response = await exec({ command: "x" }, { stream: true });
    const reader = events(response);
    await eventually(() => backend.starts.length === 1, "start");
    // Nobody reads until the first 1 MiB is out and the command is quiet.
    await new Promise((resolve) => setTimeout(resolve, 150));
    const all: StreamEvent[] = [];
    for (let event = await reader.next(); event; event = await reader.next()) all.push(event);
    const stdout = outputOf(all);
    const last = stdout.at(-1);
    const before = bytesOf(stdout.slice(0, -1));
    expect(before.skipped).toBe(0);
    expect(last).toEqual({
      type: "stdout",
      data: "after\n",
      skippedBytes: 16 * CHUNK - before.data,
    });
    expect(last?.skippedBytes).toBeGreaterThan(0);
    // stderr had no room either; its count comes with its last event.
    expect(outputOf(all, "stderr")).toEqual([{ type: "stderr", data: "", skippedBytes: 4 }]);
    expect(all.at(-1)).toMatchObject({
      type: "exit",
      result: { stdoutBytes: 16 * CHUNK + 6, stderr: "err\n", stderrBytes: 4 },
    });
  });

  it("a reader that keeps up sees every byte and no skippedBytes", async () => {
    const { exec } = setupBridge(
      {},
      {
        script: () => ({
          repeat: { chunk: { data: "z".repeat(CHUNK), delayMs: 1 }, times: 16 },
        }),
      },
    );
    const all = await events(await exec({ command: "x" }, { stream: true })).all();
    const output = outputOf(all);
    expect(bytesOf(output)).toEqual({ data: 16 * CHUNK, skipped: 0 });
    expect(output.every((event) => !("skippedBytes" in event))).toBe(true);
  });

  it("counts a character cut by a skip as skipped, never forwarding half of it", async () => {
    // 3-byte characters in chunks that split them: the reader's room runs out mid-character.
    const text = "€".repeat(200_000);
    const bytes = encoder.encode(text);
    const chunks: { data: Uint8Array }[] = [];
    for (let at = 0; at < bytes.byteLength; at += 10_001) {
      chunks.push({ data: bytes.subarray(at, at + 10_001) });
    }
    const { exec, logger } = setupBridge(
      { streamBufferBytes: 32 * KiB },
      { script: () => ({ chunks }) },
    );
    const response = await exec({ command: "x" }, { stream: true });
    await eventually(() => logger.entries.length === 1, "the call's log line");
    const output = outputOf(await events(response).all());
    const { data, skipped } = bytesOf(output);
    expect(skipped).toBeGreaterThan(0);
    expect(data + skipped).toBe(bytes.byteLength);
    for (const event of output) expect(event.data).toMatch(/^€*$/);
  });
});

describe("the final event, framed piece by piece", () => {
  it("joins to exactly the event's frame, whatever the output holds", () => {
    const unit = fc.constantFrom(
      "a",
      "\u0000",
      "\n",
      '"',
      "\\",
      "é",
      "😀",
      "\ud800",
      "\udc00",
      "\u2028",
    );
    fc.assert(
      fc.property(
        fc.string({ unit, maxLength: 50_000 }),
        fc.string({ unit, maxLength: 20_000 }),
        fc.boolean(),
        (stdout, stderr, extensions) => {
          const result = extensions
            ? {
                stdout,
                stderr,
                code: 0,
                outcome: "exited" as const,
                stdoutBytes: 1,
                stdoutTruncated: true,
              }
            : { stdout, stderr, code: 3 };
          const event = { type: "exit" as const, result };
          const pieces = [...framePieces(event)];
          expect(pieces.join("")).toBe(`event: exit\ndata: ${JSON.stringify(event)}\n\n`);
          // Large output comes in pieces of bounded size.
          for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(16_384 * 6 + 2);
        },
      ),
      {
        numRuns: 60,
        examples: [
          // A surrogate pair across the piece boundary, and control characters escaped 6 to 1.
          [`${"a".repeat(16_383)}😀${"\u0000".repeat(40_000)}`, "é".repeat(20_000), true],
          ["\ud800".repeat(33_000), "", false],
        ],
      },
    );
  });

  it("frames an error event whole", () => {
    const event = {
      type: "error" as const,
      error: { error: "boom", code: "sandbox_error" as const },
    };
    expect([...framePieces(event)]).toEqual([`event: error\ndata: ${JSON.stringify(event)}\n\n`]);
  });
});
