import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import {
  AbortError,
  createClient,
  type RemoteTaskClient,
  type TaskResult,
  TimeoutError,
} from "@remote-task/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskTool } from "../src/index.js";
import { fakeClient, taskResult } from "./helpers/fake-client.js";

// The inputs follow the recipes in test/golden/generate.py, an independent implementation of
// the reference tool's algorithm (and of the deliberate differences the README lists) that
// wrote the expected bytes.
function cjkLines(): string {
  let text = "";
  for (let i = 1; i <= 1500; i++) text += `行${i}：${"漢字かな交じり文".repeat(4)}\n`;
  return text;
}
function numbered(prefix: string, count: number): string {
  let text = "";
  for (let i = 1; i <= count; i++) text += `${prefix} ${i}\n`;
  return text;
}
function buildLog(lines: number): string {
  let text = "";
  for (let i = 1; i <= lines; i++) text += `line ${i} of the build log\n`;
  return text;
}

const TOKEN = "golden-token-1234";
/**
 * HTTP answers the real client receives, by case name (the same bytes as `ANSWERS` in
 * generate.py): a bridge's error answers, and reference-shape results too large to show whole.
 */
const ANSWERS: Record<string, { status: number; body: string }> = {
  "http-401-reference": { status: 401, body: '{"error":"unauthorized"}' },
  "http-401-bridge": {
    status: 401,
    body: '{"error":"Missing or wrong bearer token; send Authorization: Bearer <token>.","code":"unauthorized"}',
  },
  "http-400-reference": { status: 400, body: '{"error":"sandboxId and command are required"}' },
  "http-400-issues": {
    status: 400,
    body: '{"error":"Exec request is invalid: see issues.","code":"invalid_request","issues":[{"path":["cwd"],"message":"cwd must be an absolute path"}]}',
  },
  "http-404-reference": { status: 404, body: '{"error":"not_found"}' },
  "http-500-reference": { status: 500, body: '{"error":"Container crashed"}' },
  "http-502-empty": { status: 502, body: "" },
  "http-400-over-limits": {
    status: 400,
    body: '{"error":"Exec request exceeds the bridge limits: see issues.","code":"invalid_request","issues":[{"path":["timeoutSeconds"],"message":"timeoutSeconds must be at most 3600"}]}',
  },
  "http-503-stderr": { status: 503, body: '{"stdout":"","stderr":"sandbox gone\\n","code":1}' },
  "http-500-empty-error": { status: 500, body: '{"error":"","stderr":""}' },
  "http-401-echoes-token": { status: 401, body: `{"error":"token ${TOKEN} is not valid here"}` },
  // Under 4 MiB: read whole, its 3 MB of stdout cut to the 1 MiB the client keeps.
  "reference-large-output": {
    status: 200,
    body: JSON.stringify({ stdout: buildLog(120_000), stderr: "warn: slow\n", code: 0 }),
  },
  // 21 MB: over the 16 MiB the client once refused, scanned as it arrives.
  "reference-huge-output": {
    status: 200,
    body: JSON.stringify({ stdout: buildLog(700_000), stderr: "", code: 2 }),
  },
};

interface Case {
  name: string;
  /**
   * What the client answers: a result, or the error it throws; or, for a name in `ANSWERS`, the
   * real client's reading of that HTTP answer.
   */
  result?: Partial<TaskResult>;
  throws?: () => Error;
  timeout?: number;
  isError: boolean;
}

const cases: Case[] = [
  { name: "stdout-only", result: { stdout: "hello\n" }, isError: false },
  {
    name: "stdout-and-stderr",
    result: { stdout: "out\n", stderr: "warn: careful\n" },
    isError: false,
  },
  { name: "stderr-only", result: { stderr: "only stderr" }, isError: false },
  { name: "no-output", result: {}, isError: false },
  { name: "success-leading-blank", result: { stdout: "\n  indented\n" }, isError: false },
  { name: "exit-code", result: { stdout: "boom\n", exitCode: 2 }, isError: true },
  { name: "exit-code-no-output", result: { exitCode: 1 }, isError: true },
  {
    name: "exit-code-leading-blank",
    result: { stdout: "\n\n  indented\n", exitCode: 1 },
    isError: true,
  },
  {
    name: "exit-code-leading-space-stderr",
    result: { stderr: "   warning: x\n", exitCode: 2 },
    isError: true,
  },
  {
    name: "exit-code-unicode-space",
    result: { stdout: "\u00a0\ufeff\u3000text\n", exitCode: 1 },
    isError: true,
  },
  {
    name: "aborted",
    throws: () => new AbortError("The call was aborted."),
    isError: true,
  },
  {
    name: "client-timeout",
    throws: () => new TimeoutError("Running the command did not finish within 15s."),
    timeout: 5,
    isError: true,
  },
  {
    name: "timeout-leading-blank",
    result: { stdout: "\n tick\n", exitCode: 124, outcome: "timeout" },
    timeout: 3,
    isError: true,
  },
  {
    name: "client-timeout-one-second",
    throws: () => new TimeoutError("Running the command did not finish within 11s."),
    timeout: 1,
    isError: true,
  },
  {
    name: "timeout-one-second",
    result: { stdout: "tick\n", exitCode: 124, outcome: "timeout" },
    timeout: 1,
    isError: true,
  },
  {
    name: "timeout-partial",
    result: { stdout: "tick 1\ntick 2\n", exitCode: 124, outcome: "timeout" },
    timeout: 5,
    isError: true,
  },
  {
    name: "timeout-no-output",
    result: { exitCode: 124, outcome: "timeout" },
    timeout: 0.5,
    isError: true,
  },
  {
    name: "cancelled",
    result: { stdout: "started\n", exitCode: 130, outcome: "cancelled" },
    isError: true,
  },
  { name: "cjk-single-line", result: { stdout: `頭${"界".repeat(20000)}` }, isError: false },
  {
    name: "cjk-lines",
    result: { stdout: cjkLines(), stderr: "エラー：最後の行\n" },
    isError: false,
  },
  { name: "emoji-at-cut", result: { stdout: `${"😀".repeat(13000)}x` }, isError: false },
  { name: "line-limit", result: { stdout: numbered("line", 3000) }, isError: false },
  {
    name: "long-line-then-newline",
    result: { stdout: `${"a".repeat(200_000)}b\n` },
    isError: false,
  },
  {
    name: "bridge-truncated",
    result: { stdout: "tail line\n", stdoutBytes: 4_400_000, stdoutTruncated: true },
    isError: false,
  },
  {
    name: "truncated-exit-code",
    result: { stdout: numbered("row", 2500), stderr: "failed at the end", exitCode: 3 },
    isError: true,
  },
  ...Object.entries(ANSWERS).map(([name, answer]) => ({
    name,
    isError: answer.status !== 200 || name === "reference-huge-output",
  })),
];

/** A bridge answering each `/exec` with the answer named by its command. */
let server: Server;
let answering: RemoteTaskClient;
beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8").on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", () => {
      const answer = ANSWERS[(JSON.parse(body) as { command: string }).command];
      res.writeHead(answer?.status ?? 500, { "content-type": "application/json" });
      res.end(answer?.body ?? '{"error":"no such case"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  answering = createClient({ url: `http://127.0.0.1:${port}`, token: TOKEN, retry: false });
});
afterAll(async () => {
  await answering?.close();
  await new Promise((resolve) => server?.close(resolve));
});

function golden(name: string): string {
  return readFileSync(new URL(`./golden/${name}.txt`, import.meta.url), "utf8");
}

describe("result text (golden, byte for byte)", () => {
  it("has a case for every golden file", () => {
    const files = readdirSync(new URL("./golden/", import.meta.url))
      .filter((file) => file.endsWith(".txt"))
      .map((file) => file.slice(0, -4))
      .sort();
    expect(cases.map((c) => c.name).sort()).toEqual(files);
  });

  for (const c of cases) {
    it(c.name, async () => {
      const tool = createRemoteTaskTool({
        client:
          c.name in ANSWERS
            ? answering
            : fakeClient(() => {
                if (c.throws) throw c.throws();
                return taskResult(c.result);
              }),
      });
      const command = c.name in ANSWERS ? c.name : "x";
      const args = c.timeout === undefined ? { command } : { command, timeout: c.timeout };
      const result = await tool.execute(args);
      expect(Buffer.from(result.text)).toEqual(Buffer.from(golden(c.name)));
      expect(result.isError).toBe(c.isError);
    });
  }

  it("never splits a character at the cut and stays within 50 KiB", async () => {
    for (const name of ["cjk-single-line", "cjk-lines", "emoji-at-cut"]) {
      const c = cases.find((x) => x.name === name)!;
      const tool = createRemoteTaskTool({ client: fakeClient(() => taskResult(c.result)) });
      const { text } = await tool.execute({ command: "x" });
      const kept = text.slice(0, text.lastIndexOf("\n\n[Showing the last "));
      // In `u` mode a character class matches only lone surrogates, never a valid pair.
      expect(kept).not.toMatch(/[\uD800-\uDFFF]|\uFFFD/u);
      expect(Buffer.byteLength(kept)).toBeLessThanOrEqual(51_200);
      const { stdout, stderr } = c.result!;
      const joined = stderr ? `${stdout}\n${stderr}` : stdout!;
      expect(joined.endsWith(kept)).toBe(true);
    }
  });
});
