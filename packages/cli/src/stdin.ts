import { fstatSync } from "node:fs";
import { brandClass } from "@remote-task/internal";
import { formatSize } from "@remote-task/protocol";

/** Most bytes of its own stdin the command line reads and sends; bridges take 1 MiB by default. */
const MAX_STDIN_BYTES = 64 * 1024 * 1024;

/** The command line's stdin holds more than {@link MAX_STDIN_BYTES}; nothing was sent. */
export class StdinTooLargeError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.StdinTooLargeError");
  override readonly name = "StdinTooLargeError";
  constructor() {
    super(
      `stdin holds more than ${formatSize(MAX_STDIN_BYTES)}, the most the command line sends; nothing was sent. Pass the data another way, or --no-stdin to run without it.`,
    );
  }
}

/**
 * True when this process's stdin is data someone means to give: a pipe (`cat data.csv |`) or a
 * regular file (`< data.csv`). A terminal would wait for typing, a socket (stdio of a program
 * that spawned this one) may never end, `/dev/null` and other devices hold nothing to send.
 */
function stdinIsData(): boolean {
  try {
    const stat = fstatSync(0);
    return stat.isFIFO() || stat.isFile();
  } catch {
    return false; // no stdin at all (fd 0 closed)
  }
}

/**
 * The whole of stdin when it is a pipe or a file ({@link stdinIsData}), to the end of input;
 * undefined when it is not, or when it is empty (the same as no stdin, so bridges without stdin
 * support still run the call).
 */
export async function readStdinData(): Promise<Uint8Array | undefined> {
  if (!stdinIsData()) return undefined;
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    total += chunk.byteLength;
    if (total > MAX_STDIN_BYTES) throw new StdinTooLargeError();
    chunks.push(chunk);
  }
  return total === 0 ? undefined : Buffer.concat(chunks, total);
}
