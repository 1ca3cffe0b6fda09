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
 * away ends the call.
 */
export function callEventStream(call: ExecCall, heartbeatIntervalMs: number): Response {
  let open = true;
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const send = (event: StreamEvent) => {
        if (!open) return;
        try {
          controller.enqueue(sseFrame(event));
        } catch {
          open = false;
        }
      };
      send(startEvent(call.sandboxId));
      heartbeat = setInterval(
        () => send({ type: "heartbeat", elapsedMs: Date.now() - call.startedAt }),
        heartbeatIntervalMs,
      );
      void call
        .finish({
          write: (stream, data) => send({ type: stream, data }),
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
  });
  return new Response(body, { headers: SSE_HEADERS });
}
