import { DEFAULT_TIMEOUT_SECONDS } from "@remote-task/protocol";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import { abortOnInterrupt } from "../interrupt.js";
import { describeError, exitCodeOf, resultJson, resultNotes } from "../report.js";

export interface RunFlags extends ConnectionFlags {
  timeout?: number;
  json?: boolean;
  stream?: boolean;
}

/** Runs one task and returns the exit code for the process. */
export async function runCommand(words: string[], flags: RunFlags): Promise<number> {
  // Like ssh: one word is the whole shell command; several are joined with spaces.
  const command = words.join(" ");
  const timeoutSeconds = flags.timeout ?? DEFAULT_TIMEOUT_SECONDS;
  let connection: Connection | undefined;
  const interrupt = abortOnInterrupt();
  try {
    connection = await connect(flags);
    const result = await connection.client.run(command, {
      timeoutSeconds,
      signal: interrupt.signal,
      ...(flags.stream && !flags.json
        ? {
            onOutput: (event) =>
              (event.stream === "stdout" ? process.stdout : process.stderr).write(event.data),
          }
        : {}),
    });
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(resultJson(result))}\n`);
    } else {
      if (!flags.stream) {
        process.stdout.write(result.stdout);
        process.stderr.write(result.stderr);
      }
      for (const note of resultNotes(result, timeoutSeconds)) {
        process.stderr.write(`remote-task: ${note}\n`);
      }
    }
    return exitCodeOf(result);
  } catch (error) {
    if (interrupt.signal.aborted) {
      process.stderr.write("remote-task: interrupted; the remote command was cancelled.\n");
      return EXIT.interrupted;
    }
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return EXIT.bridge;
  } finally {
    interrupt.dispose();
    await connection?.close();
  }
}
