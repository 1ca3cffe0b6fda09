import { Command, CommanderError } from "commander";
import { version } from "../package.json";
import { declareAttach } from "./commands/attach.js";
import { declareHealth } from "./commands/health.js";
import { declareMcp } from "./commands/mcp.js";
import { declareRun } from "./commands/run.js";
import { declareRunMany } from "./commands/run-many.js";
import { declareServe } from "./commands/serve.js";
import { declareStatus } from "./commands/status.js";
import { EXIT } from "./exit-codes.js";

/** The `remote-task` program; `run()` sets the exit code through `onExit`. */
function createProgram(onExit: (code: number) => void): Command {
  const program = new Command("remote-task")
    .description("Run shell commands in fresh, throwaway sandboxes through a remote-task bridge.")
    .version(version, "-v, --version")
    .exitOverride()
    .enablePositionalOptions()
    .showHelpAfterError("(add --help for usage and examples)");

  declareRun(program, onExit);
  declareRunMany(program, onExit);
  declareServe(program, onExit);
  declareHealth(program, onExit);
  declareAttach(program, onExit);
  declareStatus(program, onExit);
  declareMcp(program, onExit);

  return program;
}

/** Parses argv and runs; resolves with the process exit code. */
export async function main(argv: string[]): Promise<number> {
  let exitCode: number = EXIT.ok;
  const program = createProgram((code) => {
    exitCode = code;
  });
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help asked for (--help, help) is a success; help shown because no command was given
      // (`commander.help`, on stderr) is a usage error, as a missing argument is.
      const shown = ["commander.helpDisplayed", "commander.version"];
      if (error.code === "commander.help") return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
      return shown.includes(error.code) ? EXIT.ok : EXIT.usage;
    }
    throw error;
  }
  return exitCode;
}
