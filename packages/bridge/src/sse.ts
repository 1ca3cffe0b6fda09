import { PROTOCOL_VERSION, type StreamEvent } from "@remote-task/protocol";
import { mapBackendError } from "./backend-errors.js";
import type { ExecCall } from "./call.js";

const encoder = new TextEncoder();

const SSE_HEADERS = {
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
 * away ends the call. A reader that does not keep up costs at most `bufferBytes` of queued
 * events (plus the one that crossed the line): while the queue is that full, output and
 * heartbeats are skipped, and the next output event of a stream says how many bytes it missed.
 */
export function callEventStream(
  call: ExecCall,
  heartbeatIntervalMs: number,
  bufferBytes: number,
): Response {
  let open = true;
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        const send = (event: StreamEvent) => {
          if (!open) return;
          try {
            controller.enqueue(sseFrame(event));
          } catch {
            open = false;
          }
        };
        const ready = () => open && (controller.desiredSize ?? 0) > 0;
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
            if (outcome.kind === "result") send({ type: "exit", result: outcome.result });
            else send({ type: "error", error: mapBackendError(outcome.error).body });
            if (!open) return;
            open = false;
            try {
              controller.close();
            } catch {
              // already cancelled by the reader
            }
          });
      },
      cancel() {
        open = false;
        clearInterval(heartbeat);
        call.end("disconnect");
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark: bufferBytes }),
  );
  return new Response(body, { headers: SSE_HEADERS });
}
