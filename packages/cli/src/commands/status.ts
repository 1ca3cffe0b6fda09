/**
 * `remote-task status ID`: the state of a durable call by its sandbox id (queued, running,
 * finished with its exit code, expired or unknown). Declares its own flags.
 */
import type { Command } from "commander";
import { type Connection, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import { nonNegativeNumber, type OnExit } from "../flags.js";
import { describeError, exitCodeOfError } from "../report.js";
import { remoteBridgeOptions, remoteFlags } from "./durable-flags.js";

interface StatusFlags {
  url?: string;
  token?: string;
  json?: boolean;
  wait?: number;
}

/** Prints the state of `sandboxId`; exit 0 when the bridge has the call, 1 when not. */
async function statusCommand(sandboxId: string, flags: StatusFlags): Promise<number> {
  let connection: Connection | undefined;
  try {
    connection = await connect(remoteFlags(flags));
    const status = await connection.client
      .attach(sandboxId)
      .status({ waitSeconds: flags.wait, timeoutSeconds: flags.wait ?? 0 });
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(status)}\n`);
    } else {
      let line: string = status.state;
      if (status.result !== undefined) {
        line += ` (${status.result.outcome ?? "exited"}, exit code ${status.result.code})`;
      } else if (status.error !== undefined) {
        line += ` (failed: ${status.error.error})`;
      }
      if (status.keptForSeconds !== undefined) line += `; kept ${status.keptForSeconds} s more`;
      process.stdout.write(`${line}\n`);
    }
    return status.state === "unknown" || status.state === "expired" ? EXIT.failed : EXIT.ok;
  } catch (error) {
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  } finally {
    await connection?.close();
  }
}

/** Declares `status` on `program`; `onExit` receives the exit code. */
export function declareStatus(program: Command, onExit: OnExit): void {
  remoteBridgeOptions(
    program
      .command("status")
      .description(
        "Show the state of a call by its sandbox id: queued, running, finished, expired or unknown.",
      )
      .argument("<sandbox-id>", "the call's sandbox id")
      .option("--json", "print the bridge's answer (CallStatus) as JSON")
      .option("--wait <seconds>", "wait up to this long for the call to end", nonNegativeNumber),
  )
    .addHelpText(
      "after",
      `
Exit code 0 when the bridge has the call, 1 when it does not (expired or unknown), 125 when the
bridge could not be asked.

Example:
  $ remote-task status mikan-task-3f2b8c1d-6a4e-4f7b-9c2d-1e5a7b9c0d3f`,
    )
    .action(async (sandboxId: string, flags: StatusFlags) => {
      onExit(await statusCommand(sandboxId, flags));
    });
}
