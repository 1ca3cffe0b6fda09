/**
 * Where `serve` gets its token without it showing in any process's argv (`/proc/<pid>/cmdline` is
 * world-readable): `--token-file <path>`, else `$CLOUDFLARE_SANDBOX_TOKEN` (or its `MIKAN_` form,
 * the variables clients read), else a random one. `--token` still works, with a warning.
 */
import { readFile } from "node:fs/promises";

const TOKEN_VARIABLES = ["CLOUDFLARE_SANDBOX_TOKEN", "MIKAN_CLOUDFLARE_SANDBOX_TOKEN"];

/**
 * Most bytes of a token: it travels in the Authorization header, and a Node.js server takes
 * 16 KiB of headers in all (a longer one is answered "malformed HTTP request").
 */
const MAX_TOKEN_BYTES = 8 * 1024;

/** Throws when `value` (from `from`) is longer than a bridge can take in a header. */
export function checkTokenSize(value: string, from: string): void {
  const bytes = Buffer.byteLength(value);
  if (bytes > MAX_TOKEN_BYTES) {
    throw new Error(
      `the token from ${from} is ${bytes} bytes; a bearer token travels in one HTTP header, so it can be at most ${MAX_TOKEN_BYTES} bytes here (a file's or a key's whole contents by mistake?).`,
    );
  }
}

export interface ServeToken {
  /** Undefined: the bridge makes a random one. */
  value?: string | undefined;
  /** Where the value came from (a flag, file or variable); undefined for a random token. */
  from?: string | undefined;
}

/** The token `serve` requires, and where it came from (see the top of this file). */
export async function serveToken(
  flags: { token?: string | undefined; tokenFile?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): Promise<ServeToken> {
  // Never handed on: the sandboxes' processes must not find it in their environment.
  const fromEnv = TOKEN_VARIABLES.map((name) => ({ name, value: env[name]?.trim() })).find(
    (entry) => entry.value,
  );
  for (const name of TOKEN_VARIABLES) delete env[name];
  if (flags.token !== undefined && flags.tokenFile !== undefined) {
    throw new Error("give the token once: --token or --token-file, not both.");
  }
  if (flags.token !== undefined) {
    checkTokenSize(flags.token, "--token");
    process.stderr.write(
      "remote-task: warning: --token puts the token in this process's command line, which every user and sandbox on this machine can read (/proc/<pid>/cmdline); pass it in $CLOUDFLARE_SANDBOX_TOKEN or --token-file <path> instead.\n",
    );
    return { value: flags.token, from: "--token" };
  }
  if (flags.tokenFile !== undefined) {
    let text: string;
    try {
      text = await readFile(flags.tokenFile, "utf8");
    } catch (error) {
      throw new Error(`cannot read --token-file ${flags.tokenFile}: ${(error as Error).message}`);
    }
    const value = text.trim();
    if (value === "") throw new Error(`--token-file ${flags.tokenFile} is empty.`);
    checkTokenSize(value, `--token-file ${flags.tokenFile}`);
    return { value, from: `--token-file ${flags.tokenFile}` };
  }
  if (fromEnv?.value !== undefined) {
    checkTokenSize(fromEnv.value, `$${fromEnv.name}`);
    return { value: fromEnv.value, from: `$${fromEnv.name}` };
  }
  return {};
}
