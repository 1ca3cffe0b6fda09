import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import type { ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import { utf8ByteLength } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_KEPT_OUTPUT_BYTES, WHOLE_RESULT_BYTES } from "../src/config.js";
import { startServer, type TestServer } from "./helpers/server.js";

/**
 * A bridge that caps nothing (the reference one) answering big exec results: the client, in a
 * process of its own so that only its memory is measured, must keep its resident memory growth
 * under 64 MiB for a 40 MiB answer (issue 15, item 12), whether the answer declares its length or
 * not, and for the largest answer it still reads whole; and it returns the tail with exact totals.
 */

const MiB = 1024 * 1024;
const RSS_GROWTH_LIMIT = 64 * MiB;
const CHILD = fileURLToPath(new URL("./helpers/huge-answer-child.ts", import.meta.url));
const DIST = fileURLToPath(new URL("../dist/index.js", import.meta.url));

// Output text with what JSON escapes and what UTF-8 widens (two-byte strings in JavaScript).
const LINE = 'build step 0042: compiled "module" in 12 ms — ok\t✓\n';
const ESCAPED_LINE = JSON.stringify(LINE).slice(1, -1);
const HEAD = '{"stdout":"';
const FOOT = '","stderr":"done\\n","code":0}';

/** An answer of about `bytes` bytes: how many lines, its exact size and its stdout's. */
function answer(bytes: number) {
  const lines = Math.floor((bytes - HEAD.length - FOOT.length) / Buffer.byteLength(ESCAPED_LINE));
  return {
    lines,
    bodyBytes: HEAD.length + lines * Buffer.byteLength(ESCAPED_LINE) + FOOT.length,
    stdoutBytes: lines * utf8ByteLength(LINE),
  };
}
const ANSWERS = {
  huge: answer(40 * MiB),
  // The largest answer the client still reads whole and parses at once.
  whole: answer(WHOLE_RESULT_BYTES),
};

/** Writes the answer piece by piece, waiting whenever the socket is full. */
async function write(res: ServerResponse, size: keyof typeof ANSWERS, declareLength: boolean) {
  const { lines, bodyBytes } = ANSWERS[size];
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (declareLength) headers["content-length"] = String(bodyBytes);
  res.writeHead(200, headers);
  res.write(HEAD);
  const block = ESCAPED_LINE.repeat(1000);
  for (let written = 0; written < lines; written += 1000) {
    const piece = lines - written >= 1000 ? block : ESCAPED_LINE.repeat(lines - written);
    if (!res.write(piece)) await new Promise((resolve) => res.once("drain", resolve));
    if (res.destroyed) return;
  }
  res.end(FOOT);
}

interface ChildReport {
  growth: number;
  exitCode: number;
  stdoutBytes: number;
  stdoutTruncated: boolean;
  stdoutKeptBytes: number;
  stdoutEnd: string;
  stderr: string;
}

function runChild(url: string, command: string, mode: "client" | "naive"): Promise<ChildReport> {
  const child = spawn(process.execPath, ["--expose-gc", CHILD, url, command, mode], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (text: string) => {
    stdout += text;
  });
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text;
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0) resolve(JSON.parse(stdout) as ChildReport);
      else reject(new Error(`the client process exited with ${code}: ${stderr}`));
    });
  });
}

let declared: TestServer;
let chunked: TestServer;
beforeAll(async () => {
  if (!existsSync(DIST)) {
    throw new Error(`${DIST} is missing: build the client first (npm run build).`);
  }
  const bridge = (declareLength: boolean) =>
    startServer((_, res, body) => {
      const { command } = JSON.parse(body) as { command: string };
      if (command === "huge" || command === "whole") void write(res, command, declareLength);
      else {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ stdout: "warm\n", stderr: "", code: 0 }));
      }
    });
  [declared, chunked] = await Promise.all([bridge(true), bridge(false)]);
});
afterAll(async () => {
  await Promise.all([declared?.close(), chunked?.close()]);
});

describe("big answers from a bridge that caps nothing", () => {
  it.each([
    ["a 40 MiB answer with its Content-Length", "huge", () => declared],
    ["a 40 MiB answer without one (chunked)", "huge", () => chunked],
    ["the largest answer read whole", "whole", () => declared],
  ] as const)(
    "%s: RSS grows by less than 64 MiB; the tail and exact totals come back",
    async (_, size, server) => {
      const { stdoutBytes } = ANSWERS[size];
      expect(stdoutBytes).toBeGreaterThan(DEFAULT_KEPT_OUTPUT_BYTES);
      const report = await runChild(server().url, size, "client");
      expect(report).toMatchObject({
        exitCode: 0,
        stdoutBytes,
        stdoutTruncated: true,
        stdoutEnd: LINE.repeat(10).slice(-200),
        stderr: "done\n",
      });
      expect(report.stdoutKeptBytes).toBeLessThanOrEqual(DEFAULT_KEPT_OUTPUT_BYTES);
      expect(report.stdoutKeptBytes).toBeGreaterThanOrEqual(DEFAULT_KEPT_OUTPUT_BYTES - 3);
      expect(report.growth).toBeLessThan(RSS_GROWTH_LIMIT);
    },
    60_000,
  );

  it("the measurement sees the difference: read whole and parsed at once, the 40 MiB answer grows RSS past the bound", async () => {
    expect(ANSWERS.huge.bodyBytes).toBeGreaterThan(40 * MiB - 1024);
    const report = await runChild(declared.url, "huge", "naive");
    expect(report.stdoutBytes).toBe(ANSWERS.huge.stdoutBytes);
    expect(report.growth).toBeGreaterThan(RSS_GROWTH_LIMIT);
  }, 60_000);
});
