import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  getDefaultEnvironment,
  StdioClientTransport,
} from "@modelcontextprotocol/sdk/client/stdio.js";
import { describe, expect, it } from "vitest";
import { MCP_SDK_MISSING } from "../src/mcp-loader.js";
import { startTestBridge } from "./helpers.js";

const run = promisify(execFile);
/** The bin as npm links it. */
const BIN = fileURLToPath(new URL("../bin/remote-task-mcp.js", import.meta.url));

/** A module hook that makes `peer` missing, with the error Node gives for a missing package. */
function without(peer: string): string {
  return `data:text/javascript,${encodeURIComponent(`
    import { registerHooks } from "node:module";
    registerHooks({
      resolve(specifier, context, next) {
        if (specifier === ${JSON.stringify(peer)} || specifier.startsWith(${JSON.stringify(`${peer}/`)})) {
          const error = new Error("Cannot find package '" + ${JSON.stringify(peer)} + "' imported from " + context.parentURL);
          error.code = "ERR_MODULE_NOT_FOUND";
          throw error;
        }
        return next(specifier, context);
      },
    });`)}`;
}

/** A module that makes this process report an older Node.js. */
const OLD_NODE = `data:text/javascript,${encodeURIComponent(
  `Object.defineProperty(process, "versions", { value: { ...process.versions, node: "20.20.2" } });`,
)}`;

async function failure(args: string[], env: NodeJS.ProcessEnv = getDefaultEnvironment()) {
  return run(process.execPath, args, { env }).then(
    () => undefined,
    (error: { code?: number; stderr?: string }) => error,
  );
}

describe("the remote-task-mcp bin", () => {
  /** The result of one call through the bin started with `args` (no CLOUDFLARE_SANDBOX_*). */
  async function callThroughBin(args: string[], command: string) {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, ...args],
      env: getDefaultEnvironment(),
      stderr: "pipe",
    });
    const client = new Client({ name: "remote-task-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      return await client.callTool({ name: "remote_task", arguments: { command } });
    } finally {
      await client.close();
    }
  }

  it("--local serves remote_task on its own embedded bridge", async () => {
    const result = await callThroughBin(["--local"], "echo via-local; exit 3");
    expect(result.isError).toBe(true);
    expect(result.content).toEqual([
      { type: "text", text: "via-local\n\n\nCommand exited with code 3" },
    ]);
  });

  it("takes the bridge from --url and --token", async () => {
    const { bridge } = await startTestBridge();
    try {
      const result = await callThroughBin(
        ["--url", bridge.url, "--token", bridge.token],
        "echo via-url",
      );
      expect(result.content).toEqual([{ type: "text", text: "via-url\n" }]);
    } finally {
      await bridge.close();
    }
  });

  it("refuses a --network that is neither a mode nor a host, saying what is accepted", async () => {
    const error = await failure([BIN, "--network", "internet"]);
    expect(error?.code).toBe(2);
    expect(error?.stderr).toContain('"internet" is neither a mode nor a host');
    expect(error?.stderr).toContain("none, open, or hosts separated by commas");
  });

  it("--local ends cleanly when the MCP client closes the session: the bridge and its backend close", async () => {
    const child = spawn(process.execPath, [BIN, "--local"], {
      env: getDefaultEnvironment(),
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    // Wait until it serves: a tools/list answer.
    child.stdin.write(
      `${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } })}\n`,
    );
    await once(child.stdout, "data");
    const exited = once(child, "exit");
    child.stdin.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    const [code, signal] = await exited;
    clearTimeout(timer);
    expect({ code, signal, stderr }).toEqual({ code: 0, signal: null, stderr: "" });
  });

  it("names the package to install when the MCP SDK is missing", async () => {
    const error = await failure(["--import", without("@modelcontextprotocol/sdk"), BIN]);
    expect(error?.code).toBe(125);
    expect(error?.stderr).toBe(`remote-task-mcp: ${MCP_SDK_MISSING}\n`);
  });

  it("prints its usage with --help and refuses unknown flags", async () => {
    const { stdout } = await run(process.execPath, [BIN, "--help"]);
    expect(stdout).toContain(
      "Usage: remote-task-mcp [--local [--isolation auto|bwrap|none] | --docker <image>] [--url <url>] [--token <token>] [--network <policy>]",
    );
    // The docker backend's default user, as run --help words it (not a fixed uid).
    expect(stdout).toContain("(default: a uid of\n                       its own per container");
    const error = await failure([BIN, "--bogus"]);
    expect(error?.code).toBe(2);
    // One line and where the usage is, not the whole help.
    expect(error?.stderr).toMatch(
      /^remote-task-mcp: Unknown option '--bogus'.*\n\(remote-task-mcp --help shows usage\)\n$/,
    );
  });

  it("refuses --docker beside --local or --url, and --docker-* flags without --docker", async () => {
    const cases: Array<[string[], string]> = [
      [["--local", "--docker", "img"], "--local and --docker name two embedded bridges"],
      [["--docker", "img", "--url", "http://127.0.0.1:1"], "--url and --docker name two bridges"],
      [["--docker-runtime", "runsc"], "--docker-runtime applies only with --docker <image>"],
      [
        ["--docker-user", "1000", "--docker-ulimit", "nproc=5"],
        "--docker-user and --docker-ulimit apply only with --docker <image>",
      ],
      [["--docker", "img", "--docker-ulimit", "nproc"], "--docker-ulimit expects name=value"],
      [
        [
          "--docker",
          "img",
          "--docker-engine",
          "unix:///nonexistent/engine.sock",
          "--docker-ulimit",
          "bogus=5",
        ],
        "ulimit bogus is not an rlimit the engine knows",
      ],
    ];
    for (const [args, message] of cases) {
      const error = await failure([BIN, ...args]);
      expect(error?.code, args.join(" ")).toBe(2);
      expect(error?.stderr).toContain(message);
    }
  });

  it("exits 125 with a clear message when no bridge is configured", async () => {
    const error = await failure([BIN]);
    expect(error?.code).toBe(125);
    expect(error?.stderr).toBe(
      "remote-task-mcp: CLOUDFLARE_SANDBOX_URL is not set. Set it (or MIKAN_CLOUDFLARE_SANDBOX_URL) to the bridge's base URL.\n",
    );
  });

  it("refuses an older Node.js with the version it needs", async () => {
    const error = await failure(["--import", OLD_NODE, BIN]);
    expect(error?.code).toBe(125);
    expect(error?.stderr).toBe(
      "remote-task-mcp needs Node.js >= 22.19.0; this is Node.js 20.20.2.\n",
    );
  });
});
