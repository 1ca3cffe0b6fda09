import { readFile } from "node:fs/promises";
import { text } from "node:stream/consumers";
import type { SettledTask } from "@remote-task/client";
import { DEFAULT_TIMEOUT_SECONDS, type NetworkPolicy } from "@remote-task/protocol";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import { abortOnInterrupt } from "../interrupt.js";
import { createProgressBar } from "../progress.js";
import {
  describeError,
  exitCodeOf,
  exitCodeOfError,
  refusedRequest,
  resultJson,
  resultNotes,
} from "../report.js";

export interface RunManyFlags extends ConnectionFlags {
  concurrency: number;
  file?: string;
  json?: boolean;
  network?: NetworkPolicy;
}

/** Commands are the non-empty lines that do not start with `#`. */
export function parseCommands(input: string): string[] {
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

function printHuman(settled: SettledTask, timeoutSeconds: number): void {
  const head = `--- [${taskNumber(settled)}] ${settled.task.command}`;
  if (settled.status === "rejected") {
    process.stdout.write(`${head} (error)\n`);
    process.stderr.write(`remote-task: ${describeError(settled.reason)}\n`);
    return;
  }
  const result = settled.value;
  const how = result.outcome === "exited" ? `exit ${result.exitCode}` : `${result.outcome}`;
  process.stdout.write(`${head} (${how}, ${(result.durationMs / 1000).toFixed(2)}s)\n`);
  process.stdout.write(result.stdout);
  if (result.stdout && !result.stdout.endsWith("\n")) process.stdout.write("\n");
  process.stderr.write(result.stderr);
  if (result.stderr && !result.stderr.endsWith("\n")) process.stderr.write("\n");
  for (const note of resultNotes(result, timeoutSeconds)) {
    process.stderr.write(`remote-task: ${note}\n`);
  }
}

/** Fans the commands out, prints results in input order, and returns the exit code. */
export async function runManyCommand(flags: RunManyFlags): Promise<number> {
  const input = flags.file ? await readFile(flags.file, "utf8") : await text(process.stdin);
  const commands = parseCommands(input);
  if (commands.length === 0) {
    process.stderr.write("remote-task: no commands given (one per line, on stdin or --file).\n");
    return EXIT.usage;
  }
  const timeoutSeconds = flags.timeout ?? DEFAULT_TIMEOUT_SECONDS;
  const interrupt = abortOnInterrupt();
  let connection: Connection | undefined;
  const started = Date.now();
  try {
    connection = await connect(flags);
    const bar = createProgressBar(process.stderr, commands.length);
    const results = await connection.client.runMany(
      commands.map((command) => ({ command, timeoutSeconds, network: flags.network })),
      {
        concurrency: flags.concurrency,
        signal: interrupt.signal,
        onProgress: (p) => bar.update(p),
      },
    );
    bar.finish();
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(results.map(settledJson), null, 2)}\n`);
    } else {
      for (const settled of results) printHuman(settled, timeoutSeconds);
    }
    const failed = results.filter((settled) => !succeeded(settled)).length;
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    process.stderr.write(
      `remote-task: ${results.length} tasks, ${results.length - failed} succeeded, ${failed} failed in ${seconds}s\n`,
    );
    if (interrupt.signal.aborted) return EXIT.interrupted;
    // Every task refused before it ran (e.g. a --timeout above the bridge's limit): a usage error.
    if (results.every((s) => s.status === "rejected" && refusedRequest(s.reason)))
      return EXIT.usage;
    return failed > 0 ? EXIT.failed : EXIT.ok;
  } catch (error) {
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  } finally {
    interrupt.dispose();
    await connection?.close();
  }
}
