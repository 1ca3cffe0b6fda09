/**
 * `remote-task-mcp`: the MCP command on its own (see mcp-command.ts), the program an MCP client's
 * configuration names. The same command as `remote-task mcp`, with the same flags and exit codes.
 */
import { EXIT } from "./exit-codes.js";
import { runMcpCommand } from "./mcp-command.js";

runMcpCommand(process.argv.slice(2), "remote-task-mcp").then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`remote-task-mcp: ${message}\n`);
    // As `remote-task mcp` and the rest of the command line: the bridge or configuration failed.
    process.exitCode = EXIT.bridge;
  },
);
