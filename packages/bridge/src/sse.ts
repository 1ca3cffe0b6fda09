import { PROTOCOL_VERSION, type StreamEvent } from "@remote-task/protocol";
import { mapBackendError } from "./backend-errors.js";
import type { ExecCall } from "./call.js";

const encoder = new TextEncoder();

export const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-store",
  "x-accel-buffering": "no",
} as const;

/** The first event of every stream: the call's sandbox id and the protocol version. */
export function startEvent(sandboxId: string): StreamEvent {
  return { type: "start", sandboxId, protocol: PROTOCOL_VERSION };
}

function sseFrame(event: StreamEvent): Uint8Array {
  return encoder.encode(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
}

/** Characters of output framed at a time in a final event (at most 6 bytes each, escaped). */
const FRAME_PIECE_CHARS = 16_384;

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/**
 * The SSE frame of a final event (`exit` carries the tails, up to two caps of output) in pieces
 * that join to exactly `sseFrame(event)`: each string is escaped a piece at a time, never
 * splitting a surrogate pair, so the frame is built only as fast as the reader takes it.
 */
export function* framePieces(event: StreamEvent): Generator<string> {
  if (event.type !== "exit") {
    yield `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
    return;
  }
  yield 'event: exit\ndata: {"type":"exit","result":{';
  let separator = "";
  for (const [key, value] of Object.entries(event.result)) {
    if (value === undefined) continue;
    yield `${separator}${JSON.stringify(key)}:`;
    separator = ",";
    if (typeof value !== "string" || value.length <= FRAME_PIECE_CHARS) {
      yield JSON.stringify(value);
      continue;
    }
    yield '"';
    for (let at = 0; at < value.length; ) {
      let end = Math.min(value.length, at + FRAME_PIECE_CHARS);
      if (end < value.length && isHighSurrogate(value.charCodeAt(end - 1))) end--;
      yield JSON.stringify(value.slice(at, end)).slice(1, -1);
      at = end;
    }
    yield '"';
  }
  yield "}}\n\n";
}

/** An event stream of events known up front (a call that ended before its command ran). */
export function eventStreamOf(events: StreamEvent[]): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const event of events) controller.enqueue(sseFrame(event));
      controller.close();
    },
  });
  return new Response(body, { headers: SSE_HEADERS });
}

/**
 * The event stream of a running call: `start`, its output as the call forwards it, a heartbeat
 * while it is quiet, then `exit` (or `error`) once the sandbox is destroyed. A reader that goes
 * away leaves the call (it ends once its grace is over with no reader re-attached). A reader that does not keep up costs at most `bufferBytes` of queued
 * events (plus the one that crossed the line): while the queue is that full, output and
 * heartbeats are skipped, and the next output event of a stream says how many bytes it missed.
 * The last event is framed piece by piece as the reader makes room for it.
 */
export function callEventStream(
  call: ExecCall,
  heartbeatIntervalMs: number,
  bufferBytes: number,
): Response {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  /** The rest of the `exit` or `error` frame, once the call is over, sent as the reader has room. */
  let last: Iterator<string> | undefined;
  const send = (event: StreamEvent) => {
    if (!open) return;
    try {
      controller.enqueue(sseFrame(event));
    } catch {
      open = false;
    }
  };
  const ready = () => open && (controller.desiredSize ?? 0) > 0;
  let sending = false;
  const sendLast = () => {
    // Enqueueing may call `pull` (this function) again at once.
    if (last === undefined || sending) return;
    sending = true;
    try {
      while (ready()) {
        const piece = last.next();
        if (piece.done) {
          last = undefined;
          open = false;
          controller.close();
          return;
        }
        controller.enqueue(encoder.encode(piece.value));
      }
    } catch {
      // cancelled by the reader meanwhile
      open = false;
      last = undefined;
    } finally {
      sending = false;
    }
  };
  const body = new ReadableStream<Uint8Array>(
    {
      start(streamController) {
        controller = streamController;
        send(startEvent(call.sandboxId));
        heartbeat = setInterval(() => {
          if (ready()) send({ type: "heartbeat", elapsedMs: Date.now() - call.startedAt });
        }, heartbeatIntervalMs);
        void call
          .finish({
            ready,
            write: (stream, data, skippedBytes) =>
              send(
                skippedBytes > 0 ? { type: stream, data, skippedBytes } : { type: stream, data },
              ),
            end: () => clearInterval(heartbeat),
          })
          .then((outcome) => {
            last = framePieces(
              outcome.kind === "result"
                ? { type: "exit", result: outcome.result }
                : { type: "error", error: mapBackendError(outcome.error).body },
            );
            sendLast();
          });
      },
      // Called whenever the reader has made room.
      pull: sendLast,
      cancel() {
        open = false;
        last = undefined;
        clearInterval(heartbeat);
        call.callerLeft();
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark: bufferBytes }),
  );
  return new Response(body, { headers: SSE_HEADERS });
}
