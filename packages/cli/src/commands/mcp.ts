/**
 * `remote-task mcp`: hands its words to the one MCP command (mcp-command.ts), which parses its
 * own flags as `remote-task-mcp` does.
 */
import type { Command } from "commander";
import { EXIT } from "../exit-codes.js";
import type { OnExit } from "../flags.js";
import { runMcpCommand } from "../mcp-command.js";
import { describeError } from "../report.js";

/** `remote-task mcp`: no flags of its own, its handler. */
export function declareMcp(program: Command, onExit: OnExit): void {
  program
    .command("mcp")
    .description(
      "Serve the remote_task tool over MCP on stdio (configured by CLOUDFLARE_SANDBOX_*, --url, or --local).",
    )
    // The MCP command parses its own flags, as `remote-task-mcp` does: one implementation.
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument("[flags...]", "the flags of remote-task-mcp (see remote-task mcp --help)")
    .action(async (args: string[]) => {
      try {
        onExit(await runMcpCommand(args, "remote-task mcp"));
      } catch (error) {
        process.stderr.write(`remote-task: ${describeError(error)}\n`);
        onExit(EXIT.bridge);
      }
    });
}
