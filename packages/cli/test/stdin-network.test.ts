import { spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, openSync } from "node:fs";
import { truncate, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { silentLogger } from "@remote-task/bridge";
import type { LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { type ErrorBody, type ExecRequest, execRequestSchema } from "@remote-task/protocol";
import { fullHealthResponse } from "@remote-task/protocol/fixtures";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { BIN, type CliResult, cleanEnv, collectCli, runCli, testDir } from "./helpers.js";

/**
 * A bridge that records each exec request (checked against the protocol schema) and answers with
 * `answer`; by default a result whose stdout is the hex of the stdin it received.
 */
let fake: Server;
let fakeUrl: string;
const received: ExecRequest[] = [];
let answer: { status: number; body: unknown } | undefined;

function stdinHex(request: ExecRequest): string {
  const { stdin } = request;
  if (stdin === undefined) return "no stdin";
  const bytes =
    typeof stdin === "string" ? Buffer.from(stdin) : Buffer.from(stdin.base64, "base64");
  return bytes.toString("hex");
}

/** A protocol 2 bridge that takes network policies and stdin. */
const fakeHealth: object = fullHealthResponse;

/** What the fake's `/health` answers (reset to {@link fakeHealth} before each test). */
let health: object = fakeHealth;

beforeAll(async () => {
  fake = createServer(async (req, res) => {
    if (req.method === "GET" && req.url === "/health") {
      // A protocol 2 bridge that takes network policies and stdin (the client asks first).
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(health));
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const request = execRequestSchema.parse(JSON.parse(Buffer.concat(chunks).toString("utf8")));
    received.push(request);
    const reply = answer ?? {
      status: 200,
      body: { stdout: stdinHex(request), stderr: "", code: 0 },
    };
    res.writeHead(reply.status, { "content-type": "application/json" });
    res.end(JSON.stringify(reply.body));
  }).listen(0, "127.0.0.1");
  await once(fake, "listening");
  fakeUrl = `http://127.0.0.1:${(fake.address() as { port: number }).port}`;
});
afterAll(() => {
  fake.closeAllConnections();
  fake.close();
});
beforeEach(() => {
  received.length = 0;
  answer = undefined;
  health = fakeHealth;
});

/** What a protocol 1 bridge answers to a request with `field`: its strict schema lacks it. */
function protocol1Refusal(field: string) {
  const body: ErrorBody = {
    error: "Invalid exec request",
    code: "invalid_request",
    issues: [{ path: [], message: `Unrecognized key: "${field}"` }],
  };
  return { status: 400, body };
}

/** Every byte value: binary input must arrive unchanged. */
const bytes = Buffer.from(Array.from({ length: 1024 }, (_, i) => (i * 7 + 3) % 256));

async function dataFile(content: Uint8Array | string): Promise<string> {
  const file = join(await testDir("rt-stdin-"), "data");
  await writeFile(file, content);
  return file;
}

/** The bin with `file` piped into it by a shell, as `cat file | remote-task ...` does. */
function runPiped(file: string, args: string[], env = cleanEnv()): Promise<CliResult> {
  const child = spawn("sh", ["-c", 'cat "$0" | "$@"', file, process.execPath, BIN, ...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return collectCli(child, args);
}

/** The bin with its stdin opened on `path` (`remote-task ... < path`). */
async function runRedirected(path: string, args: string[], env = cleanEnv()): Promise<CliResult> {
  const fd = openSync(path, "r");
  try {
    const child = spawn(process.execPath, [BIN, ...args], { env, stdio: [fd, "pipe", "pipe"] });
    return await collectCli(child, args);
  } finally {
    closeSync(fd);
  }
}

/** `run` arguments against the fake bridge. */
const fakeRun = (...words: string[]) => ["run", "--url", fakeUrl, ...words];

describe("run: stdin", () => {
  it("sends piped bytes byte-exact (cat data | remote-task run)", async () => {
    const { code, stdout } = await runPiped(await dataFile(bytes), fakeRun("--", "wc -c"));
    expect(code).toBe(0);
    expect(stdout).toBe(bytes.toString("hex"));
    expect(received[0]?.stdin).toEqual({ base64: bytes.toString("base64") });
  });

  it("sends a redirected file (remote-task run < data)", async () => {
    const { code, stdout } = await runRedirected(await dataFile(bytes), fakeRun("--", "wc -c"));
    expect(code).toBe(0);
    expect(stdout).toBe(bytes.toString("hex"));
  });

  it("does not read a socket (spawned with stdio 'pipe'), /dev/null, or an empty pipe", async () => {
    // runCli spawns with stdio "pipe": a socket, written and closed.
    const socket = await runCli(fakeRun("--", "true"), { input: "not for the command" });
    const devNull = await runRedirected("/dev/null", fakeRun("--", "true"));
    const empty = await runPiped(await dataFile(""), fakeRun("--", "true"));
    for (const result of [socket, devNull, empty]) {
      expect(result.code).toBe(0);
      expect(result.stdout).toBe("no stdin");
    }
    expect(received).toHaveLength(3);
    for (const request of received) expect(request).not.toHaveProperty("stdin");
  });

  it("--no-stdin never reads it", async () => {
    const { code, stdout } = await runPiped(
      await dataFile(bytes),
      fakeRun("--no-stdin", "--", "true"),
    );
    expect(code).toBe(0);
    expect(stdout).toBe("no stdin");
  });

  it("stdin too large for the bridge: a clear message and exit 125", async () => {
    const words = "stdin is 1024 bytes; this bridge takes at most 16";
    answer = { status: 413, body: { error: words, code: "payload_too_large" } satisfies ErrorBody };
    const { code, stderr } = await runPiped(await dataFile(bytes), fakeRun("--", "wc -c"));
    expect(code).toBe(125);
    expect(stderr).toContain("InvalidRequestError");
    expect(stderr).toContain(words);
    expect(stderr).toContain("Its stdin (1024 bytes, 1.0KB) is too large for this bridge");
    expect(stderr).toContain("--no-stdin");
  });

  it("a bridge too old for stdin: says so, exit 125", async () => {
    answer = protocol1Refusal("stdin");
    const { code, stderr } = await runPiped(await dataFile("a\n"), fakeRun("--", "wc -l"));
    expect(code).toBe(125);
    expect(stderr).toContain("too old for `stdin`");
    expect(stderr).toContain("--no-stdin");
  });

  it("more stdin than the command line sends is refused before sending, exit 125", async () => {
    const file = await dataFile("");
    await truncate(file, 64 * 1024 * 1024 + 1); // sparse: no disk used
    const { code, stderr } = await runRedirected(file, fakeRun("--", "wc -c"));
    expect(code).toBe(125);
    expect(stderr).toContain("stdin holds more than 64.0MB");
    expect(received).toHaveLength(0);
  });
});

describe("--network", () => {
  it.each([
    ["none", "none"],
    ["open", "open"],
    [
      "pypi.org,*.pythonhosted.org:443, 10.0.0.7",
      { allow: ["pypi.org", "*.pythonhosted.org:443", "10.0.0.7"] },
    ],
  ])("--network %s is sent as the protocol's policy", async (flag, policy) => {
    const { code } = await runCli(fakeRun("--network", flag, "--", "true"));
    expect(code).toBe(0);
    expect(received[0]?.network).toEqual(policy);
  });

  it("without it no policy is sent (the bridge's default applies)", async () => {
    await runCli(fakeRun("--", "true"));
    expect(received[0]).not.toHaveProperty("network");
  });

  it.each(["https://pypi.org", "PyPI.org", "pypi.org,,x.org", ""])(
    "refuses %j as a usage error before sending",
    async (flag) => {
      const { code, stderr } = await runCli(fakeRun("--network", flag, "--", "true"));
      expect(code).toBe(2);
      expect(stderr).toContain("expected none, open, or hosts separated by commas");
      expect(received).toHaveLength(0);
    },
  );

  it("more than the bridge allows (403 forbidden): ForbiddenError, exit 2", async () => {
    const words = "network open is more than this bridge allows (ceiling: none)";
    answer = { status: 403, body: { error: words, code: "forbidden" } satisfies ErrorBody };
    const { code, stderr } = await runCli(fakeRun("--network", "open", "--", "true"));
    expect(code).toBe(2);
    expect(stderr).toContain("ForbiddenError");
    expect(stderr).toContain(words);
    expect(stderr).toContain("Check --network");
    expect(received).toHaveLength(1);
  });

  it("a bridge whose /health reports neither (the reference bridge) is sent no call with them", async () => {
    health = { ok: true };
    const piped = await runPiped(await dataFile("a\n"), fakeRun("--", "wc -l"));
    expect(piped.code).toBe(125);
    expect(piped.stderr).toContain("does not take stdin");
    expect(piped.stderr).toContain("--no-stdin");
    const network = await runCli(fakeRun("--network", "none", "--", "true"));
    expect(network.code).toBe(2);
    expect(network.stderr).toContain("does not control network access");
    expect(received).toEqual([]);
  });

  it("a bridge too old for --network: says so, exit 2", async () => {
    answer = protocol1Refusal("network");
    const { code, stderr } = await runCli(fakeRun("--network", "none", "--", "true"));
    expect(code).toBe(2);
    expect(stderr).toContain("too old for `network`");
    expect(stderr).toContain("Check --network.");
  });

  it("run-many sends it with every task", async () => {
    const { code } = await runCli(["run-many", "--url", fakeUrl, "--network", "example.com"], {
      input: "echo one\necho two\n",
    });
    expect(code).toBe(0);
    expect(received.map((r) => r.network)).toEqual([
      { allow: ["example.com"] },
      { allow: ["example.com"] },
    ]);
  });
});

describe("mcp --network", () => {
  it("sends the policy with every call; the model cannot change it", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, "mcp", "--network", "pypi.org"],
      env: cleanEnv({ CLOUDFLARE_SANDBOX_URL: fakeUrl }) as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "remote-task-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: "true", network: "open" },
      });
      expect(result.isError).toBe(false);
      expect(received.map((r) => r.network)).toEqual([{ allow: ["pypi.org"] }]);
    } finally {
      await client.close();
    }
  });
});

// Runs once the embedded local bridge takes stdin (it reports `limits.maxStdinBytes`).
describe.skipIf(!existsSync("/usr/bin/curl"))("run --local --network with a loopback host", () => {
  it("reaches it: whoever runs --local is the deployer (the bridge itself stays out of reach)", async () => {
    const server = createServer((_req, res) => res.end("hello from loopback"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const { code, stdout, stderr } = await runCli([
        "run",
        "--local",
        "--network",
        `localhost:${port}`,
        "--",
        `/usr/bin/curl -s http://localhost:${port}/`,
      ]);
      expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
      expect(stdout).toBe("hello from loopback");
    } finally {
      server.close();
    }
  });
});

describe("against the embedded local bridge", () => {
  let bridge: EmbeddedBridge<LocalBackend>;
  beforeAll(async () => {
    bridge = await startEmbeddedBridge({ logger: silentLogger });
  });
  afterAll(async () => {
    await bridge?.close();
  });

  it("cat data | remote-task run delivers the bytes to the command", async (context) => {
    const health = (await (
      await fetch(`${bridge.url}/health`, { headers: { authorization: `Bearer ${bridge.token}` } })
    ).json()) as { limits?: { maxStdinBytes?: number } };
    if (health.limits?.maxStdinBytes === undefined) context.skip("the bridge takes no stdin yet");
    const env = cleanEnv({
      CLOUDFLARE_SANDBOX_URL: bridge.url,
      CLOUDFLARE_SANDBOX_TOKEN: bridge.token,
    });
    const { code, stdout } = await runPiped(
      await dataFile(bytes),
      ["run", "--", "od -An -v -tx1 | tr -d ' \\n'"],
      env,
    );
    expect(code).toBe(0);
    expect(stdout).toBe(bytes.toString("hex"));
  });
});
