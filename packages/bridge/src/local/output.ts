import type { Readable } from "node:stream";
import type { OutputChunk } from "../backend.js";

/** Chunks queued before both pipes are paused; the consumer's pace bounds memory. */
const HIGH_WATER_CHUNKS = 16;
const LOW_WATER_CHUNKS = 4;

/**
 * Both pipes of a child as one ordered chunk stream. Pipes are paused while the consumer is
 * behind, so nothing accumulates beyond a few chunks however much the command prints. Once both
 * are closed, the chunks `epilogue` returns end the stream (notes about the run).
 */
export async function* mergeOutput(
  stdout: Readable,
  stderr: Readable,
  epilogue: () => Promise<OutputChunk[]> = async () => [],
): AsyncGenerator<OutputChunk> {
  const queue: OutputChunk[] = [];
  const pipes = [
    { stream: "stdout" as const, readable: stdout },
    { stream: "stderr" as const, readable: stderr },
  ];
  let open = pipes.length;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const cleanups: Array<() => void> = [];
  for (const { stream, readable } of pipes) {
    const onData = (data: Buffer) => {
      queue.push({ stream, data });
      if (queue.length >= HIGH_WATER_CHUNKS) for (const p of pipes) p.readable.pause();
      notify();
    };
    let closed = false;
    const onClose = () => {
      if (closed) return;
      closed = true;
      open--;
      notify();
    };
    readable.on("data", onData);
    readable.once("end", onClose);
    readable.once("close", onClose);
    readable.once("error", onClose);
    // A pipe may have ended before anyone listened (a command without output that is already
    // done): its "end" and "close" are gone.
    if (readable.readableEnded || readable.destroyed) onClose();
    cleanups.push(() => {
      readable.off("data", onData);
      readable.off("end", onClose);
      readable.off("close", onClose);
      readable.off("error", onClose);
    });
  }
  try {
    for (;;) {
      const chunk = queue.shift();
      if (chunk !== undefined) {
        if (queue.length <= LOW_WATER_CHUNKS) {
          for (const p of pipes) if (p.readable.isPaused()) p.readable.resume();
        }
        yield chunk;
        continue;
      }
      if (open === 0) {
        yield* await epilogue();
        return;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  } finally {
    for (const cleanup of cleanups) cleanup();
    if (open > 0) {
      stdout.destroy();
      stderr.destroy();
    }
  }
}
