/**
 * Flags more than one command declares (connection, timing, network, the embedded bridge's
 * isolation and limits) and the parsers of flag values; each command declares its own in
 * commands/.
 */
import { type Command, InvalidArgumentError, Option } from "commander";
import { dockerOptions } from "./docker.js";
import { EXIT } from "./exit-codes.js";
import { networkPolicy } from "./network.js";
import { LIMIT_OPTIONS, limitOptions } from "./sandbox-limits.js";
import { secretNames } from "./secrets.js";

/** Called with the process exit code once a command has run. */
export type OnExit = (code: number) => void;

/** A number greater than 0 (seconds, mostly). */
export function positiveNumber(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError("expected a number > 0.");
  return n;
}

/** A number of at least 0. */
export function nonNegativeNumber(value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new InvalidArgumentError("expected a number >= 0.");
  }
  return n;
}

export function absolutePath(value: string): string {
  if (!value.startsWith("/")) {
    throw new InvalidArgumentError(
      "expected an absolute path inside the sandbox, e.g. /workspace/sub.",
    );
  }
  return value;
}

export function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError("expected an integer > 0.");
  return n;
}

export function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65_535) {
    throw new InvalidArgumentError("expected a port number 0-65535 (0 picks a free one).");
  }
  return n;
}

export function uidRange(value: string): { first: number; count: number } {
  const match = /^(\d+):(\d+)$/.exec(value);
  if (match === null) throw new InvalidArgumentError("expected FIRST:COUNT, e.g. 1900000000:1024.");
  return { first: Number(match[1]), count: Number(match[2]) };
}

export const maxOutputOption = (stream: boolean) =>
  new Option(
    "--max-output-bytes <n>",
    `bytes of each output to keep: the end${stream ? " (with --stream, the start is streamed)" : ""}; up to the bridge's maxOutputBytes (default 1048576), which with --local or --docker it raises`,
  ).argParser(positiveInteger);

export const isolationOption = (description: string) =>
  new Option("--isolation <mode>", description).choices(["auto", "bwrap", "none"]).default("auto");

export function connectionOptions(command: Command): Command {
  return limitOptions(dockerOptions(command), " of the embedded bridge (--local or --docker)")
    .option("--url <url>", "bridge URL (default: $CLOUDFLARE_SANDBOX_URL)")
    .option("--token <token>", "bridge token (default: $CLOUDFLARE_SANDBOX_TOKEN)")
    .option("--local", "start the embedded local bridge in this process for this run")
    .addOption(isolationOption("isolation of the embedded bridge's sandboxes (only with --local)"));
}

export function networkOption(command: Command, scope: string): Command {
  return command.option(
    "--network <policy>",
    `where ${scope} may connect: none, open, or host[,host...] (default: the bridge's default)`,
    networkPolicy,
  );
}

/** `--secrets NAME[,NAME...]`: the bridge's secrets `scope` may use, by name. */
export function secretsOption(command: Command, scope: string): Command {
  return command.option(
    "--secrets <names>",
    `secrets ${scope} may use, by name, among those the bridge declares (remote-task health lists them): NAME[,NAME...], repeat for more; the command sees a placeholder in $NAME, never the value`,
    secretNames,
  );
}

export function timingOptions(command: Command, timeoutHelp: string): Command {
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
 * without `--local` (or, for the limits, `--docker`) there is no such bridge. `--secrets` asks a
 * bridge for secrets its deployer declared, and the embedded bridge declares none.
 */
export function refuseEmbeddedOnlyFlags(command: Command): void {
  const given = (name: string) => command.getOptionValueSource(name) === "cli";
  const { local, docker } = command.opts();
  if (given("secrets") && (local || docker !== undefined)) {
    command.error(
      `error: --secrets asks a bridge for secrets its deployer declared, and the embedded bridge of --${local ? "local" : "docker"} declares none; serve one with remote-task serve --secret NAME=env:VAR@HOSTS and point --url (or $CLOUDFLARE_SANDBOX_URL) at it.`,
      { exitCode: EXIT.usage, code: "remote-task.secretsWithEmbedded" },
    );
  }
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
