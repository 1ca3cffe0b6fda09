/**
 * The flags of the durable-call commands: `attach` and `status` reach a running bridge
 * (`--url`, `--token`; an embedded one would know no calls), `serve` sets what its bridge keeps.
 */
import { type Command, InvalidArgumentError } from "commander";
import { nonNegativeNumber } from "../flags.js";

function wholeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new InvalidArgumentError("expected an integer >= 0.");
  return n;
}

/** `--url` and `--token` of a command that talks to a running bridge. */
export function remoteBridgeOptions(command: Command): Command {
  return command
    .option("--url <url>", "bridge URL (default: $CLOUDFLARE_SANDBOX_URL)")
    .option("--token <token>", "bridge token (default: $CLOUDFLARE_SANDBOX_TOKEN)");
}

/** What `serve`'s bridge keeps of its calls, as its flags give it. */
export interface DurableFlags {
  keepSeconds?: number;
  maxKept?: number;
  maxKeptBytes?: number;
  disconnectGrace?: number;
}

/** `serve`'s flags for durable calls. */
export function durableServeOptions(command: Command): Command {
  return command
    .option(
      "--keep-seconds <seconds>",
      "how long a call's result is kept for re-attach after it ends (default 600)",
      nonNegativeNumber,
    )
    .option(
      "--max-kept <n>",
      "most calls kept: detached ones running and results (default 4096)",
      wholeNumber,
    )
    .option(
      "--max-kept-bytes <n>",
      "most bytes of kept calls (default 134217728); detached calls beyond it are refused (429)",
      wholeNumber,
    )
    .option(
      "--disconnect-grace <seconds>",
      "how long a call whose caller's connection dropped runs on for a re-attach (default 10)",
      nonNegativeNumber,
    );
}

/** The bridge's `durable` option from `serve`'s flags (undefined fields: the defaults). */
export function durableOptions(flags: DurableFlags) {
  return {
    keptSeconds: flags.keepSeconds,
    maxKept: flags.maxKept,
    maxKeptBytes: flags.maxKeptBytes,
    disconnectGraceSeconds: flags.disconnectGrace,
  };
}

/** The connection flags of `--url` and `--token` (a running bridge, never an embedded one). */
export function remoteFlags(flags: { url?: string; token?: string }): {
  url?: string;
  token?: string;
} {
  return {
    ...(flags.url === undefined ? {} : { url: flags.url }),
    ...(flags.token === undefined ? {} : { token: flags.token }),
  };
}
