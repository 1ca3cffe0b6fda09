/**
 * Where `serve` gets its token without it showing in any process's argv (`/proc/<pid>/cmdline` is
 * world-readable): `--token-file <path>`, else `$CLOUDFLARE_SANDBOX_TOKEN` (or its `MIKAN_` form,
 * the variables clients read), else a random one. `--token` still works, with a warning. A token
 * file that group or others may read or write is refused, as ssh refuses such a key: under
 * isolation none a command may read this process's argv, then the file.
 */
import { open } from "node:fs/promises";

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
    let mode: number;
    try {
      // The mode of the file read, not of whatever the path names a moment later.
      const file = await open(flags.tokenFile, "r");
      try {
        mode = (await file.stat()).mode & 0o777;
        text = await file.readFile("utf8");
      } finally {
        await file.close();
      }
    } catch (error) {
      throw new Error(`cannot read --token-file ${flags.tokenFile}: ${(error as Error).message}`);
    }
    if (process.platform !== "win32" && (mode & 0o077) !== 0) {
      throw new Error(
        `--token-file ${flags.tokenFile} has mode ${mode.toString(8).padStart(4, "0")}: its group or other users may read it, and so may every sandbox given their uid. Make it readable by its owner only: chmod 600 ${flags.tokenFile}`,
      );
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
