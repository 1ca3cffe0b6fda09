#!/usr/bin/env node
/**
 * `remote-task-mcp`: the MCP command (see mcp-command.ts). The MCP SDK is an optional peer, loaded
 * only here, so a missing one is named instead of a stack trace.
 */

async function main(): Promise<number> {
  let mcp: typeof import("@remote-task/tool/mcp");
  try {
    mcp = await import("@remote-task/tool/mcp");
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    if (code === "ERR_MODULE_NOT_FOUND" && String(message).includes("'@modelcontextprotocol/sdk")) {
      throw new Error(
        "the MCP server needs @modelcontextprotocol/sdk, which is not installed. Install it next to @remote-task/tool: npm install @modelcontextprotocol/sdk",
      );
    }
    throw error;
  }
  return mcp.runMcpCommand(process.argv.slice(2), "remote-task-mcp");
}

main().then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`remote-task-mcp: ${message}\n`);
    // As `remote-task mcp` and the rest of the command line: the bridge or configuration failed.
    process.exitCode = 125;
  },
);
