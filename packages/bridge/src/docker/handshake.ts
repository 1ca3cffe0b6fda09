/**
 * The start of a call inside its container: the prelude's report comes first on stderr (ready,
 * or the cwd is missing), and the command runs only once it said ready. What the image's shell
 * printed before that is kept for the call's output, or quoted when the shell never got there.
 */
import type { Socket } from "node:net";
import { DOCKER_TEXTS } from "@remote-task/internal";
import { BackendError, type ExecSpec, type OutputChunk } from "../backend.js";
import { missingCwdMarker, readyMarker } from "./container.js";
import type { FrameReader } from "./frames.js";

export interface Handshake {
  spec: ExecSpec;
  socket: Socket;
  reader: FrameReader;
  /** The call's random marker (see container.ts). */
  nonce: string;
  cwd: string;
  image: string;
  exit: Promise<number>;
}

/**
 * Reads until the prelude said ready (then hands the command its stdin) and returns the output
 * read meanwhile; throws when the cwd is missing or the shell ended first.
 */
export async function awaitReady(call: Handshake): Promise<OutputChunk[]> {
  const { spec, socket, reader, nonce, cwd } = call;
  const early: OutputChunk[] = [];
  let report = "";
  const readyLine = readyMarker(nonce);
  const missing = missingCwdMarker(nonce);
  for (;;) {
    const chunk = await reader.next();
    if (chunk === undefined) {
      const code = await call.exit.catch(() => undefined);
      throw new BackendError(
        "sandbox_error",
        DOCKER_TEXTS.noShell(
          call.image,
          code,
          Buffer.concat(early.map((c) => Buffer.from(c.data)))
            .toString("utf8")
            .slice(0, 500),
        ),
      );
    }
    if (chunk.stream === "stdout") {
      early.push(chunk);
      continue;
    }
    report += Buffer.from(chunk.data).toString("latin1");
    if (
      report.length < readyLine.length &&
      (readyLine.startsWith(report) || missing.startsWith(report))
    )
      continue;
    if (report.startsWith(missing)) {
      throw new BackendError("invalid_request", DOCKER_TEXTS.missingCwd(cwd), { path: ["cwd"] });
    }
    if (report.startsWith(readyLine)) {
      // The shell has read its script: the rest of its input is the command's.
      if (spec.stdin !== undefined) socket.end(spec.stdin);
      const rest = Buffer.from(report.slice(readyLine.length), "latin1");
      if (rest.length > 0) early.push({ stream: "stderr", data: rest });
      return early;
    }
    // Not the prelude's report: the image's shell said something else (it failed).
    early.push({ stream: "stderr", data: Buffer.from(report, "latin1") });
    report = "";
  }
}

/** The call's output: what was read before ready, then the rest of the stream. */
export async function* callOutput(
  early: OutputChunk[],
  reader: FrameReader,
): AsyncGenerator<OutputChunk> {
  try {
    yield* early;
    for (let chunk = await reader.next(); chunk !== undefined; chunk = await reader.next()) {
      yield chunk;
    }
  } finally {
    await reader.close();
  }
}
