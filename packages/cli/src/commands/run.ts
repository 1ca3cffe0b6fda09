import { type OutputEvent, RemoteTaskError } from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import { DEFAULT_TIMEOUT_SECONDS, formatSize } from "@remote-task/protocol";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import {
  abortOnInterrupt,
  interruptedExitCode,
  interruptedWord,
  isOutputClosed,
} from "../interrupt.js";
import {
  cancelNote,
  describeError,
  exitCodeOf,
  exitCodeOfError,
  hasReplacement,
  refusedStdin,
  resultJson,
  resultNotes,
  type StreamedOutput,
  shownOutput,
} from "../report.js";
import { commandFromWords } from "../shell.js";
import { readStdinData, StdinTooLargeError } from "../stdin.js";
import { runDetached } from "./run-detached.js";

export interface RunFlags extends ConnectionFlags {
  json?: boolean;
  stream?: boolean;
  network?: NetworkPolicy;
  /** False with `--no-stdin`. */
  stdin?: boolean;
  /** Bytes of the end of each output to keep (and, with `--stream`, of its start to stream). */
  maxOutputBytes?: number;
  /** Start the command as a durable call and print its id (`--detach`). */
  detach?: boolean;
}

/** Most characters of each stream kept to show when the run is interrupted. */
const INTERRUPTED_TAIL_CHARS = 1024 * 1024;

/** The end of one stream's output as it arrives, at most `limit` characters of it. */
class OutputTail {
  #text = "";
  #dropped = 0;
  constructor(readonly limit: number) {}

  add(data: string): void {
    this.#text += data;
    if (this.#text.length > 2 * this.limit) {
      this.#dropped += this.#text.length - this.limit;
      this.#text = this.#text.slice(-this.limit);
    }
  }

  /** The kept end, and how many characters before it were dropped. */
  get(): { text: string; dropped: number } {
    const extra = Math.max(0, this.#text.length - this.limit);
    return { text: this.#text.slice(extra), dropped: this.#dropped + extra };
  }
}

/** Writes what arrived before an interrupt, so Ctrl-C never throws away printed output. */
function showArrived(tails: Record<OutputEvent["stream"], OutputTail>): void {
  for (const [stream, tail] of Object.entries(tails) as Array<
    [OutputEvent["stream"], OutputTail]
  >) {
    const { text, dropped } = tail.get();
    if (dropped > 0) {
      process.stderr.write(
        `remote-task: (${stream}: only the last ${formatSize(Buffer.byteLength(text))} of what arrived is shown)\n`,
      );
    }
    (stream === "stdout" ? process.stdout : process.stderr).write(text);
  }
}

const streamOf = (stream: OutputEvent["stream"]) =>
  stream === "stdout" ? process.stdout : process.stderr;

/**
 * `--json` on a failure: one object on stdout too, so a script reading stdout always gets JSON
 * (`error.name` tells the kinds apart, `mayHaveRun` whether the command may have started).
 */
function printJsonError(error: unknown): void {
  const known = RemoteTaskError.isInstance(error);
  const body = {
    error: {
      name: error instanceof Error ? error.name : "Error",
      message: error instanceof Error ? error.message : String(error),
      ...(known ? { mayHaveRun: error.mayHaveRun } : {}),
    },
    ...(known && error.sandboxId !== undefined ? { sandboxId: error.sandboxId } : {}),
  };
  process.stdout.write(`${JSON.stringify(body)}\n`);
}

/** Runs one task and returns the exit code for the process. */
export async function runCommand(words: string[], flags: RunFlags): Promise<number> {
  if (flags.detach) return runDetached(words, flags);
  const command = commandFromWords(words);
  const timeoutSeconds = flags.timeout ?? DEFAULT_TIMEOUT_SECONDS;
  const tails = {
    stdout: new OutputTail(INTERRUPTED_TAIL_CHARS),
    stderr: new OutputTail(INTERRUPTED_TAIL_CHARS),
  };
  const streamed: Record<OutputEvent["stream"], StreamedOutput> = {
    stdout: { shown: 0, skipped: 0, replaced: false },
    stderr: { shown: 0, skipped: 0, replaced: false },
  };
  const onOutput = (event: OutputEvent) => {
    if (!flags.stream) {
      tails[event.stream].add(event.data);
      return;
    }
    const live = streamed[event.stream];
    live.shown += Buffer.byteLength(event.data);
    live.skipped += event.skippedBytes ?? 0;
    live.replaced ||= hasReplacement(event.data);
    streamOf(event.stream).write(event.data);
  };
  let stdin: Uint8Array | undefined;
  try {
    // Read before Ctrl-C is handled: until the input ends, Ctrl-C just stops the program.
    stdin = flags.stdin === false ? undefined : await readStdinData();
  } catch (error) {
    if (!StdinTooLargeError.isInstance(error)) throw error;
    if (flags.json) printJsonError(error);
    process.stderr.write(`remote-task: ${error.message}\n`);
    return EXIT.bridge;
  }
  let connection: Connection | undefined;
  const interrupt = abortOnInterrupt();
  try {
    connection = await connect(flags);
    const result = await connection.client.run(command, {
      timeoutSeconds,
      signal: interrupt.signal,
      network: flags.network,
      stdin,
      maxOutputBytes: flags.maxOutputBytes,
      ...(flags.json ? {} : { onOutput }),
    });
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(resultJson(result))}\n`);
    } else {
      if (!flags.stream) {
        process.stdout.write(shownOutput(result, "stdout"));
        process.stderr.write(shownOutput(result, "stderr"));
      }
      // A reader that went away while the output was written hears nothing more (no notes).
      await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
      if (isOutputClosed()) return EXIT.outputClosed;
      const notes = resultNotes(
        result,
        timeoutSeconds,
        flags.stream ? streamed : undefined,
        flags.maxOutputBytes,
      );
      for (const note of notes) process.stderr.write(`remote-task: ${note}\n`);
    }
    return exitCodeOf(result);
  } catch (error) {
    if (interrupt.signal.aborted) {
      // A reader that closed stdout ends the command quietly, as `seq … | head` does.
      if (isOutputClosed()) return EXIT.outputClosed;
      if (!flags.stream && !flags.json) showArrived(tails);
      const sandboxId = RemoteTaskError.isInstance(error) ? error.sandboxId : undefined;
      const note =
        connection === undefined
          ? "nothing was sent."
          : await cancelNote(connection.client, sandboxId, timeoutSeconds);
      if (flags.json) printJsonError(error);
      process.stderr.write(`remote-task: ${interruptedWord(interrupt.by())}; ${note}\n`);
      return interruptedExitCode(interrupt.by());
    }
    if (stdin !== undefined && refusedStdin(error)) {
      if (flags.json) printJsonError(error);
      process.stderr.write(
        `remote-task: ${describeError(error)} Or pass --no-stdin to run without it.\n`,
      );
      return EXIT.bridge;
    }
    if (flags.json) printJsonError(error);
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  } finally {
    interrupt.dispose();
    await connection?.close();
  }
}
