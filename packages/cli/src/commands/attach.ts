/**
 * `remote-task attach ID`: re-attaches to a durable call by its sandbox id (one started with
 * `run --detach`, or any call the bridge still has) and prints its output and exit code as
 * `run` would have. Declares its own flags.
 */
import type { Command } from "commander";
import { type Connection, connect } from "../connect.js";
import { type OnExit, positiveNumber } from "../flags.js";
import { abortOnInterrupt, interruptedExitCode, interruptedWord } from "../interrupt.js";
import {
  describeError,
  exitCodeOf,
  exitCodeOfError,
  resultJson,
  resultNotes,
  shownOutput,
} from "../report.js";
import { remoteBridgeOptions, remoteFlags } from "./durable-flags.js";

interface AttachFlags {
  url?: string;
  token?: string;
  json?: boolean;
  stream?: boolean;
  timeout?: number;
}

/** Waits for the call `sandboxId` and prints its result; resolves with the exit code. */
async function attachCommand(sandboxId: string, flags: AttachFlags): Promise<number> {
  let connection: Connection | undefined;
  const interrupt = abortOnInterrupt();
  try {
    connection = await connect(remoteFlags(flags));
    const handle = connection.client.attach(sandboxId);
    const wait = { signal: interrupt.signal, timeoutSeconds: flags.timeout };
    if (flags.stream && !flags.json) {
      for await (const event of handle.stream(wait)) {
        if (event.type === "stdout" || event.type === "stderr") {
          (event.type === "stdout" ? process.stdout : process.stderr).write(event.data);
        }
      }
    }
    const result = await handle.result(wait);
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(resultJson(result))}\n`);
    } else {
      if (!flags.stream) {
        process.stdout.write(shownOutput(result, "stdout"));
        process.stderr.write(shownOutput(result, "stderr"));
      }
      for (const note of resultNotes(result, Math.round(result.durationMs / 100) / 10)) {
        process.stderr.write(`remote-task: ${note}\n`);
      }
    }
    return exitCodeOf(result);
  } catch (error) {
    if (interrupt.signal.aborted) {
      process.stderr.write(
        `remote-task: ${interruptedWord(interrupt.by())}; the call ${sandboxId} runs on (remote-task attach ${sandboxId} follows it again).\n`,
      );
      return interruptedExitCode(interrupt.by());
    }
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  } finally {
    interrupt.dispose();
    await connection?.close();
  }
}

/** Declares `attach` on `program`; `onExit` receives the exit code. */
export function declareAttach(program: Command, onExit: OnExit): void {
  remoteBridgeOptions(
    program
      .command("attach")
      .description(
        "Re-attach to a call by its sandbox id (e.g. from run --detach): its output and exit code, as run prints them.",
      )
      .argument("<sandbox-id>", "the call's sandbox id")
      .option("--json", "print the result as one JSON object")
      .option("--stream", "print the output the bridge retains, then follow it live")
      .option(
        "--timeout <seconds>",
        "most seconds to wait for the call to end (default 120; the call itself runs on)",
        positiveNumber,
      ),
  )
    .addHelpText(
      "after",
      `
Needs a bridge with durable calls (remote-task health shows "durable"). A call the bridge no
longer has (its result expired, or the bridge restarted) is an error (exit 125); it is never
run again. Ctrl-C stops waiting; the call runs on.

Examples:
  $ id=$(remote-task run --detach -- 'sleep 60; echo done')
  $ remote-task attach "$id"`,
    )
    .action(async (sandboxId: string, flags: AttachFlags) => {
      onExit(await attachCommand(sandboxId, flags));
    });
}
