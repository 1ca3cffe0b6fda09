import { readFile } from "node:fs/promises";
import { text } from "node:stream/consumers";
import {
  AbortError,
  AuthenticationError,
  ConfigurationError,
  ConnectionError,
  ForbiddenError,
  ProtocolError,
  type RemoteTaskError,
  type SettledTask,
} from "@remote-task/client";
import { DEFAULT_TIMEOUT_SECONDS, type NetworkPolicy } from "@remote-task/protocol";
import type { Command } from "commander";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import {
  connectionOptions,
  maxOutputOption,
  networkOption,
  type OnExit,
  positiveInteger,
  refuseEmbeddedOnlyFlags,
  secretsOption,
  timingOptions,
} from "../flags.js";
import {
  abortOnInterrupt,
  interruptedExitCode,
  interruptedWord,
  isOutputClosed,
} from "../interrupt.js";
import { createProgressBar } from "../progress.js";
import {
  cancelNote,
  describeError,
  exitCodeOf,
  exitCodeOfError,
  refusedRequest,
  resultJson,
  resultNotes,
  shownOutput,
} from "../report.js";

interface RunManyFlags extends ConnectionFlags {
  concurrency?: number | undefined;
  file?: string;
  json?: boolean;
  network?: NetworkPolicy;
  /** Names of the bridge's secrets the command may use (`--secrets`). */
  secrets?: string[];
  maxOutputBytes?: number;
}

/** `1 task`, `2 tasks`. */
function tasks(n: number): string {
  return `${n} ${n === 1 ? "task" : "tasks"}`;
}

/**
 * A failure no later task can escape: the bridge cannot be reached, refuses the token, is not a
 * bridge, or refuses the --network every task asks for. The rest are not sent (they would each
 * fail the same way, after their own retries).
 */
function failsEveryTask(error: RemoteTaskError): boolean {
  return [
    AuthenticationError,
    ConfigurationError,
    ConnectionError,
    ProtocolError,
    ForbiddenError,
  ].some((kind) => kind.isInstance(error));
}

/** Most characters of a command shown in a result's header line (the JSON keeps it whole). */
const HEADER_COMMAND_CHARS = 120;

/** `--- [n] command`, with a long command cut to its start and its length said. */
function header(settled: SettledTask): string {
  const { command } = settled.task;
  const shown =
    command.length <= HEADER_COMMAND_CHARS
      ? command
      : `${command.slice(0, HEADER_COMMAND_CHARS)}... (${command.length} characters)`;
  return `--- [${taskNumber(settled)}] ${shown}`;
}

/** A task aborted by the run's stop (Ctrl-C, or a failure every task would meet): not run. */
function stoppedTask(settled: SettledTask, stopped: boolean): boolean {
  return stopped && settled.status === "rejected" && AbortError.isInstance(settled.reason);
}

/** The commands: from `--file`, else stdin (on a terminal, after saying how to end the input). */
async function readInput(flags: RunManyFlags): Promise<string | undefined> {
  if (flags.file !== undefined) {
    try {
      return await readFile(flags.file, "utf8");
    } catch (error) {
      process.stderr.write(
        `remote-task: cannot read --file ${flags.file}: ${(error as Error).message}\n`,
      );
      return undefined;
    }
  }
  if (process.stdin.isTTY) {
    process.stderr.write(
      "remote-task: reading commands from stdin, one per line; end with Ctrl-D (or pass --file <path>; --help shows usage).\n",
    );
  }
  return text(process.stdin);
}

/** Commands are the non-empty lines that do not start with `#`. */
function parseCommands(input: string): string[] {
  return input
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
}

function succeeded(settled: SettledTask): boolean {
  return settled.status === "fulfilled" && exitCodeOf(settled.value) === 0;
}

/** Tasks are numbered from 1 in both outputs: `[1]` in the text, `"task": 1` in the JSON. */
function taskNumber(settled: SettledTask): number {
  return settled.index + 1;
}

function settledJson(settled: SettledTask) {
  const base = { task: taskNumber(settled), command: settled.task.command };
  return settled.status === "fulfilled"
    ? { ...base, ok: succeeded(settled), result: resultJson(settled.value) }
    : {
        ...base,
        ok: false,
        error: { name: settled.reason.name, message: settled.reason.message },
      };
}

function printHuman(
  settled: SettledTask,
  timeoutSeconds: number,
  stopped: boolean,
  askedBytes: number | undefined,
): void {
  const head = header(settled);
  if (stoppedTask(settled, stopped)) {
    process.stdout.write(`${head} (stopped)\n`);
    return;
  }
  if (settled.status === "rejected") {
    process.stdout.write(`${head} (error)\n`);
    process.stderr.write(`remote-task: ${describeError(settled.reason)}\n`);
    return;
  }
  const result = settled.value;
  const how = result.outcome === "exited" ? `exit ${result.exitCode}` : `${result.outcome}`;
  process.stdout.write(`${head} (${how}, ${(result.durationMs / 1000).toFixed(2)}s)\n`);
  const stdout = shownOutput(result, "stdout");
  const stderr = shownOutput(result, "stderr");
  process.stdout.write(stdout);
  if (stdout && !stdout.endsWith("\n")) process.stdout.write("\n");
  process.stderr.write(stderr);
  if (stderr && !stderr.endsWith("\n")) process.stderr.write("\n");
  for (const note of resultNotes(result, timeoutSeconds, undefined, askedBytes)) {
    process.stderr.write(`remote-task: ${note}\n`);
  }
}

/** Fans the commands out, prints results in input order, and returns the exit code. */
async function runManyCommand(flags: RunManyFlags): Promise<number> {
  const input = await readInput(flags);
  if (input === undefined) return EXIT.usage;
  const commands = parseCommands(input);
  if (commands.length === 0) {
    process.stderr.write("remote-task: no commands given (one per line, on stdin or --file).\n");
    return EXIT.usage;
  }
  const timeoutSeconds = flags.timeout ?? DEFAULT_TIMEOUT_SECONDS;
  const interrupt = abortOnInterrupt();
  // Aborted by Ctrl-C, or by a failure every later task would meet too.
  const stop = new AbortController();
  interrupt.signal.addEventListener("abort", () => stop.abort(), { once: true });
  let stoppedBy: RemoteTaskError | undefined;
  let connection: Connection | undefined;
  const started = Date.now();
  try {
    connection = await connect(flags);
    const bar = createProgressBar(process.stderr, commands.length);
    const results = await connection.client.runMany(
      commands.map((command) => ({
        command,
        timeoutSeconds,
        network: flags.network,
        secrets: flags.secrets,
        maxOutputBytes: flags.maxOutputBytes,
      })),
      {
        concurrency: flags.concurrency,
        signal: stop.signal,
        onProgress: (progress, settled) => {
          bar.update(progress);
          if (settled.status === "rejected" && !stop.signal.aborted) {
            if (failsEveryTask(settled.reason)) {
              stoppedBy = settled.reason;
              stop.abort();
            }
          }
        },
      },
    );
    bar.finish();
    if (isOutputClosed()) return EXIT.outputClosed;
    const stopped = stop.signal.aborted;
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(results.map(settledJson), null, 2)}\n`);
    } else {
      for (const settled of results) {
        // After a stop, only the failure that stopped the run is explained (once, below).
        if (
          stoppedBy !== undefined &&
          settled.status === "rejected" &&
          failsEveryTask(settled.reason)
        ) {
          process.stdout.write(`${header(settled)} (error)\n`);
        } else printHuman(settled, timeoutSeconds, stopped, flags.maxOutputBytes);
      }
    }
    const notRun = results.filter((settled) => stoppedTask(settled, stopped));
    const failed = results.filter((settled) => !succeeded(settled)).length - notRun.length;
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (stoppedBy !== undefined) {
      process.stderr.write(
        `remote-task: ${describeError(stoppedBy)}\nremote-task: stopped early: ${tasks(notRun.length)} stopped or never sent, since each would fail the same way.\n`,
      );
    } else if (interrupt.signal.aborted) {
      const sandboxId = notRun
        .map((s) => (s.status === "rejected" ? s.reason.sandboxId : undefined))
        .find((id) => id !== undefined);
      const note =
        sandboxId === undefined
          ? ""
          : `; for those that had started, ${await cancelNote(connection.client, sandboxId, timeoutSeconds)}`;
      process.stderr.write(
        `remote-task: ${interruptedWord(interrupt.by())}: ${tasks(notRun.length)} stopped or never sent${note}\n`,
      );
    }
    process.stderr.write(
      `remote-task: ${tasks(results.length)}, ${results.length - failed - notRun.length} succeeded, ${failed} failed${notRun.length > 0 ? `, ${notRun.length} stopped or never sent` : ""} in ${seconds}s\n`,
    );
    if (interrupt.signal.aborted) return interruptedExitCode(interrupt.by());
    if (stoppedBy !== undefined) return exitCodeOfError(stoppedBy);
    // Every task refused before it ran (e.g. a --timeout above the bridge's limit): a usage error.
    if (results.every((s) => s.status === "rejected" && refusedRequest(s.reason)))
      return EXIT.usage;
    return failed > 0 ? EXIT.failed : EXIT.ok;
  } catch (error) {
    if (isOutputClosed()) return EXIT.outputClosed;
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  } finally {
    interrupt.dispose();
    await connection?.close();
  }
}

/** `remote-task run-many`: its flags, help and handler. */
export function declareRunMany(program: Command, onExit: OnExit): void {
  connectionOptions(
    timingOptions(
      secretsOption(networkOption(program.command("run-many"), "each command"), "each command")
        .description("Run one command per line (from --file or stdin), each in its own sandbox.")
        .option(
          "--concurrency <n>",
          "most tasks in flight at once (default: as many as the bridge says it can take, up to 64)",
          positiveInteger,
        )
        .option("--file <path>", "read commands from this file instead of stdin"),
      "per-task timeout in seconds (default 120)",
    )
      .option("--json", "print all results as a JSON array")
      .addOption(maxOutputOption(false)),
  )
    .addHelpText(
      "after",
      `
Each line is one shell command line (pipes and ; work). Blank lines and lines starting with #
are skipped. Results print in input order, numbered from 1 ([1] in the text, "task": 1 in the
JSON); a progress bar shows on stderr when it is a terminal. A long command is shortened in its
header line (the JSON keeps it whole). Exit code 1 when any task failed; a failure every task
would meet (no bridge, a refused token, a refused --network) stops the run once, with that
failure's code; Ctrl-C stops it (130; tasks not run to their end are counted apart).

Examples:
  $ printf 'echo one\\necho two\\nexit 3\\n' | remote-task run-many --local
  $ remote-task run-many --local --concurrency 32 --file tasks.txt --json > results.json
  $ remote-task run-many --secrets GH_TOKEN --file gh-calls.txt   # the bridge declares GH_TOKEN`,
    )
    .action(async (flags, command: Command) => {
      refuseEmbeddedOnlyFlags(command);
      onExit(await runManyCommand(flags));
    });
}
