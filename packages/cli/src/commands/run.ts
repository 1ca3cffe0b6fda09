import { type OutputEvent, RemoteTaskError } from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import { DEFAULT_TIMEOUT_SECONDS, formatSize } from "@remote-task/protocol";
import type { Command } from "commander";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import {
  absolutePath,
  connectionOptions,
  maxOutputOption,
  networkOption,
  type OnExit,
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

interface RunFlags extends ConnectionFlags {
  json?: boolean;
  stream?: boolean;
  network?: NetworkPolicy;
  /** Names of the bridge's secrets the command may use (`--secrets`). */
  secrets?: string[];
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
async function runCommand(words: string[], flags: RunFlags): Promise<number> {
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
      secrets: flags.secrets,
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

/** `remote-task run`: its flags, help and handler. */
export function declareRun(program: Command, onExit: OnExit): void {
  connectionOptions(
    timingOptions(
      secretsOption(networkOption(program.command("run"), "the command"), "the command")
        .description("Run one command in a fresh sandbox and print its output.")
        .argument(
          "<command...>",
          "one word: a shell command line; several: a command and its arguments, kept as given",
        ),
      "task timeout in seconds (default 120)",
    )
      .option(
        "--cwd <dir>",
        "working directory inside the sandbox (default /workspace)",
        absolutePath,
      )
      .option("--json", "print the result as one JSON object")
      .option(
        "--stream",
        "stream output live as it arrives (from a remote-task bridge; the reference bridge sends it at the end)",
      )
      .addOption(maxOutputOption(true))
      .option("--no-stdin", "never send this program's stdin (see below for when it is sent)")
      .option(
        "--detach",
        "start the command on the bridge, print its sandbox id and exit; remote-task attach ID gets its output",
      )
      .passThroughOptions(),
  )
    .addHelpText(
      "after",
      `
The command after --: one word is a shell command line, so pipes and ; work:
  $ remote-task run --local -- 'ls / | wc -l'
Several words are a command and its arguments, each kept as one argument (quoted for the
shell), like docker exec or kubectl exec:
  $ remote-task run --local -- sh -c 'exit 7'     # runs sh with "-c" and "exit 7"; exits 7
  $ remote-task run --local -- echo 'a   b'       # prints "a   b"

Standard input is sent to the command when it is a pipe or a file, read to its end first
(nothing is sent when it is empty); a terminal, a socket or /dev/null is never read; --no-stdin
never reads it:
  $ cat data.csv | remote-task run --local -- 'wc -l'
  $ remote-task run --local -- 'sha256sum' < image.png

--network: none (nowhere), open (the internet), or
hosts separated by commas (name, *.name, IPv4, [IPv6], each with an optional :port). Asking for
more than the bridge allows is refused (exit 2); remote-task health shows its default and ceiling:
  $ remote-task run --network pypi.org,files.pythonhosted.org -- 'pip download requests'
With --local or --docker you are the embedded bridge's deployer: the hosts you name may be
private or loopback ones (never the bridge itself):
  $ remote-task run --local --network localhost:8080 -- 'curl -s http://localhost:8080/'

--secrets: secrets the bridge's deployer declared (remote-task serve --secret; remote-task
health lists their names and hosts), by name. The command sees a placeholder in $NAME, which
the bridge swaps for the value only in request headers to that secret's hosts; a name the
bridge does not declare is refused (exit 2). The embedded bridge of --local declares none:
  $ remote-task run --secrets GH_TOKEN -- 'curl -s -H "Authorization: Bearer $GH_TOKEN" https://api.github.com/user'

Exit code: the command's own, 124 on timeout, 125 when the bridge or configuration failed (or
its stdin is too large), 2 for a usage error (a flag value the bridge refuses included), 130
when interrupted (Ctrl-C), 143 on SIGTERM, 141 when the reader of stdout went away (| head).
With --json a failure is also one object on stdout: {"error": {"name", "message", "mayHaveRun"}}.
On an interrupt the remote command is cancelled where the bridge has /cancel; the reference
bridge has none, and its command runs on to its end or its timeout (the message says which).

Output travels as text: bytes that are not UTF-8 arrive as U+FFFD (a note says so); for
binary output, pipe it through base64 in the command and decode it here:
  $ remote-task run --local -- 'tar czh /etc/os-release | base64' | base64 -d > os-release.tgz

Examples:
  $ remote-task run --local -- uname -a
  $ remote-task run --local --stream -- 'for i in 1 2 3; do echo $i; sleep 1; done'
  $ CLOUDFLARE_SANDBOX_URL=https://bridge.example.workers.dev remote-task run -- 'nproc'
  $ remote-task run --json --timeout 10 -- 'python3 -c "print(2**100)"'`,
    )
    .action(async (words: string[], flags, command: Command) => {
      refuseEmbeddedOnlyFlags(command);
      onExit(await runCommand(words, flags));
    });
}
