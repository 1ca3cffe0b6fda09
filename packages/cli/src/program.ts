import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import packageJson from "../package.json" with { type: "json" };
import { registerAttach } from "./commands/attach.js";
import { durableServeOptions } from "./commands/durable-flags.js";
import { healthCommand } from "./commands/health.js";
import { runCommand } from "./commands/run.js";
import { runManyCommand } from "./commands/run-many.js";
import { serveCommand } from "./commands/serve.js";
import { registerStatus } from "./commands/status.js";
import { dockerOptions } from "./docker.js";
import { EXIT } from "./exit-codes.js";
import { hostList, networkPolicy } from "./network.js";
import { describeError } from "./report.js";
import { LIMIT_OPTIONS, limitOptions } from "./sandbox-limits.js";

function positiveNumber(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError("expected a number > 0.");
  return n;
}

function nonNegativeNumber(value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new InvalidArgumentError("expected a number >= 0.");
  }
  return n;
}

function absolutePath(value: string): string {
  if (!value.startsWith("/")) {
    throw new InvalidArgumentError(
      "expected an absolute path inside the sandbox, e.g. /workspace/sub.",
    );
  }
  return value;
}

function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError("expected an integer > 0.");
  return n;
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65_535) {
    throw new InvalidArgumentError("expected a port number 0-65535 (0 picks a free one).");
  }
  return n;
}

function uidRange(value: string): { first: number; count: number } {
  const match = /^(\d+):(\d+)$/.exec(value);
  if (match === null) throw new InvalidArgumentError("expected FIRST:COUNT, e.g. 1900000000:1024.");
  return { first: Number(match[1]), count: Number(match[2]) };
}

const maxOutputOption = (stream: boolean) =>
  new Option(
    "--max-output-bytes <n>",
    `bytes of each output to keep: the end${stream ? " (with --stream, the start is streamed)" : ""}; up to the bridge's maxOutputBytes (default 1048576), which with --local or --docker it raises`,
  ).argParser(positiveInteger);

const isolationOption = (description: string) =>
  new Option("--isolation <mode>", description).choices(["auto", "bwrap", "none"]).default("auto");

function connectionOptions(command: Command): Command {
  return limitOptions(dockerOptions(command), " of the embedded bridge (--local or --docker)")
    .option("--url <url>", "bridge URL (default: $CLOUDFLARE_SANDBOX_URL)")
    .option("--token <token>", "bridge token (default: $CLOUDFLARE_SANDBOX_TOKEN)")
    .option("--local", "start the embedded local bridge in this process for this run")
    .addOption(isolationOption("isolation of the embedded bridge's sandboxes (only with --local)"));
}

function networkOption(command: Command, scope: string): Command {
  return command.option(
    "--network <policy>",
    `where ${scope} may connect: none, open, or host[,host...] (default: the bridge's default)`,
    networkPolicy,
  );
}

function timingOptions(command: Command, timeoutHelp: string): Command {
  return command
    .option("--timeout <seconds>", timeoutHelp, positiveNumber)
    .option(
      "--grace <seconds>",
      "extra wait for a stalled bridge before giving up (default: the timeout, 10..30)",
      nonNegativeNumber,
    );
}

/**
 * `--isolation` picks how the embedded bridge isolates, and the limit flags size its sandboxes;
 * without `--local` (or, for the limits, `--docker`) there is no such bridge.
 */
function refuseEmbeddedOnlyFlags(command: Command): void {
  const given = (name: string) => command.getOptionValueSource(name) === "cli";
  const { local, docker } = command.opts();
  if (given("isolation") && !local) {
    command.error("error: --isolation applies only with --local (the embedded bridge).", {
      exitCode: EXIT.usage,
      code: "remote-task.isolationWithoutLocal",
    });
  }
  const limits = LIMIT_OPTIONS.filter(given);
  if (limits.length > 0 && !local && docker === undefined) {
    const flags = limits.map((name) => `--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
    command.error(
      `error: ${flags.join(" and ")} ${flags.length === 1 ? "applies" : "apply"} only with --local or --docker (the embedded bridge); a remote bridge's limits are its deployer's.`,
      { exitCode: EXIT.usage, code: "remote-task.limitsWithoutEmbedded" },
    );
  }
}

/** The `remote-task` program; `run()` sets the exit code through `onExit`. */
function createProgram(onExit: (code: number) => void): Command {
  const program = new Command("remote-task")
    .description("Run shell commands in fresh, throwaway sandboxes through a remote-task bridge.")
    .version(packageJson.version, "-v, --version")
    .exitOverride()
    .enablePositionalOptions()
    .showHelpAfterError("(add --help for usage and examples)");

  connectionOptions(
    timingOptions(
      networkOption(program.command("run"), "the command")
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

  connectionOptions(
    timingOptions(
      networkOption(program.command("run-many"), "each command")
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
  $ remote-task run-many --local --concurrency 32 --file tasks.txt --json > results.json`,
    )
    .action(async (flags, command: Command) => {
      refuseEmbeddedOnlyFlags(command);
      onExit(await runManyCommand(flags));
    });

  limitOptions(dockerOptions(durableServeOptions(program.command("serve"))), "")
    .description("Serve the embedded bridge over HTTP: --local, or --docker IMAGE for containers.")
    .option(
      "--local",
      "serve the embedded bridge with the local backend (or --docker IMAGE for containers)",
    )
    .option("--port <port>", "port (0 picks a free one)", port, 0)
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option(
      "--token-file <path>",
      "read the bearer token to require from this file (default: $CLOUDFLARE_SANDBOX_TOKEN, else a random one)",
    )
    .option(
      "--token <token>",
      "bearer token to require; visible to every process on this machine, so prefer --token-file or $CLOUDFLARE_SANDBOX_TOKEN",
    )
    .addOption(isolationOption("isolation of the bridge's sandboxes"))
    .option(
      "--uids <first:count>",
      "host uids for sandboxes when run as root (default 1900000000:1024)",
      uidRange,
    )
    .option(
      "--network-default <policy>",
      "network of a call that names none: none, open or hosts (default none; bwrap only)",
      networkPolicy,
    )
    .option(
      "--network-ceiling <policy>",
      "the most network a call may ask for: none, open or hosts (default: the default)",
      networkPolicy,
    )
    .option(
      "--allow-private <hosts>",
      "private or loopback hosts calls with network may reach (e.g. 10.0.0.7:3141); never this bridge",
      hostList,
    )
    .addHelpText(
      "after",
      `
It serves until Ctrl-C.

Example, letting calls ask for the Python package index (and nothing else):
  $ remote-task serve --local --network-ceiling pypi.org,files.pythonhosted.org

Example, with tighter per-sandbox limits than the defaults:
  $ remote-task serve --local --processes 64 --memory-mib 512

Example, in two terminals: start it in one, paste the export line it prints into the other,
then run commands there:
  $ remote-task serve --local --port 8787
  $ export CLOUDFLARE_SANDBOX_URL=http://127.0.0.1:8787 CLOUDFLARE_SANDBOX_TOKEN=...
  $ remote-task run -- uname -a
Example, in one shell: choose the token yourself (serve reads $CLOUDFLARE_SANDBOX_TOKEN, so it
never shows in a command line) and serve in the background:
  $ export CLOUDFLARE_SANDBOX_URL=http://127.0.0.1:8787 CLOUDFLARE_SANDBOX_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')
  $ remote-task serve --local --port 8787 > /dev/null &
  $ remote-task run -- uname -a
  $ kill %1`,
    )
    .action(async (flags) => onExit(await serveCommand(flags)));

  connectionOptions(
    program
      .command("health")
      .description("Check a bridge: protocol, backend, isolation and limits.")
      .option("--json", "print the health answer as JSON"),
  )
    .addHelpText(
      "after",
      `
Examples:
  $ remote-task health --url http://127.0.0.1:8787 --token "$TOKEN"
  $ remote-task health --local`,
    )
    .action(async (flags, command: Command) => {
      refuseEmbeddedOnlyFlags(command);
      onExit(await healthCommand(flags));
    });

  registerAttach(program, onExit);
  registerStatus(program, onExit);

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
      const { runMcpCommand } = await import("@remote-task/tool/mcp");
      try {
        onExit(await runMcpCommand(args, "remote-task mcp"));
      } catch (error) {
        process.stderr.write(`remote-task: ${describeError(error)}\n`);
        onExit(EXIT.bridge);
      }
    });

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
