/**
 * `remote-task run --detach`: starts the command as a durable call and prints its sandbox id;
 * the command runs on to its own deadline. `remote-task attach ID` gets its output and exit code.
 */

import type { NetworkPolicy } from "@remote-task/protocol";
import { DEFAULT_TIMEOUT_SECONDS } from "@remote-task/protocol";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import { describeError, exitCodeOfError } from "../report.js";
import { commandFromWords } from "../shell.js";
import { readStdinData, StdinTooLargeError } from "../stdin.js";

/** The flags of `run` a detached call uses. */
interface DetachFlags extends ConnectionFlags {
  json?: boolean;
  network?: NetworkPolicy;
  secrets?: string[];
  stdin?: boolean;
}

/** Starts the command detached and prints its id (`--json`: `{sandboxId, state}`). */
export async function runDetached(words: string[], flags: DetachFlags): Promise<number> {
  if (flags.local || flags.docker !== undefined) {
    process.stderr.write(
      "remote-task: --detach needs a bridge that outlives this program (--url or $CLOUDFLARE_SANDBOX_URL); the embedded bridge of --local or --docker ends with it.\n",
    );
    return EXIT.usage;
  }
  let connection: Connection | undefined;
  try {
    const stdin = flags.stdin === false ? undefined : await readStdinData();
    connection = await connect(flags);
    const handle = await connection.client.start(commandFromWords(words), {
      timeoutSeconds: flags.timeout ?? DEFAULT_TIMEOUT_SECONDS,
      network: flags.network,
      secrets: flags.secrets,
      stdin,
      maxOutputBytes: flags.maxOutputBytes,
    });
    process.stdout.write(
      flags.json
        ? `${JSON.stringify({ sandboxId: handle.sandboxId, state: "started" })}\n`
        : `${handle.sandboxId}\n`,
    );
    return EXIT.ok;
  } catch (error) {
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return StdinTooLargeError.isInstance(error) ? EXIT.bridge : exitCodeOfError(error);
  } finally {
    await connection?.close();
  }
}
