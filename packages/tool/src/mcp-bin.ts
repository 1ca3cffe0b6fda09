#!/usr/bin/env node
/**
 * `remote-task-mcp`: serves `remote_task` over MCP on stdio. The MCP SDK and, for `--local`,
 * the bridge are optional peers, loaded only here, so a missing one is named instead of a stack
 * trace.
 */
import { parseArgs } from "node:util";

const USAGE = `Usage: remote-task-mcp [--local]

Serves the remote_task tool over the Model Context Protocol on stdio, for an MCP client to start.
The bridge comes from CLOUDFLARE_SANDBOX_URL (and CLOUDFLARE_SANDBOX_TOKEN, CLOUDFLARE_SANDBOX_CWD).

Options:
  --local    start the embedded local bridge in this process instead (needs @remote-task/bridge)
  -h, --help show this help
`;

/** Imports an optional peer's module; a missing package becomes a message naming it. */
async function load<T>(load: () => Promise<T>, peer: string, purpose: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    if (code === "ERR_MODULE_NOT_FOUND" && String(message).includes(`'${peer}`)) {
      throw new Error(
        `${purpose} needs ${peer}, which is not installed. Install it next to @remote-task/tool: npm install ${peer}`,
      );
    }
    throw error;
  }
}

/** Starts the embedded bridge; the returned variables point the tool at it. */
async function startEmbeddedBridge() {
  const purpose = "--local (the embedded bridge)";
  const [{ startLocalBridge }, { createLocalBackend }, { stderrLogger }] = await Promise.all([
    load(() => import("@remote-task/bridge/node"), "@remote-task/bridge", purpose),
    load(() => import("@remote-task/bridge/local"), "@remote-task/bridge", purpose),
    load(() => import("@remote-task/bridge"), "@remote-task/bridge", purpose),
  ]);
  // Only problems are logged; stdout is the MCP channel, the log goes to stderr.
  const bridge = await startLocalBridge({
    backend: createLocalBackend({ isolation: "auto" }),
    logger: (entry) => {
      if (entry.level === "error") stderrLogger(entry);
    },
  });
  const env = { CLOUDFLARE_SANDBOX_URL: bridge.url, CLOUDFLARE_SANDBOX_TOKEN: bridge.token };
  return { env, close: () => bridge.close() };
}

async function main(): Promise<number> {
  let flags: { local?: boolean | undefined; help?: boolean | undefined };
  try {
    flags = parseArgs({
      options: { local: { type: "boolean" }, help: { type: "boolean", short: "h" } },
    }).values;
  } catch (error) {
    process.stderr.write(`remote-task-mcp: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (flags.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const { runMcpStdio } = await load(
    () => import("@remote-task/tool/mcp"),
    "@modelcontextprotocol/sdk",
    "the MCP server",
  );
  const local = flags.local ? await startEmbeddedBridge() : undefined;
  try {
    await runMcpStdio({ env: { ...process.env, ...local?.env } });
  } catch (error) {
    await local?.close();
    throw error;
  }
  if (local) process.stdin.once("end", () => void local.close());
  return 0;
}

main().then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`remote-task-mcp: ${message}\n`);
    process.exitCode = 1;
  },
);
