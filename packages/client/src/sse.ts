import { formatSize, type StreamEvent, streamEventSchema } from "@remote-task/protocol";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { abortableChunks } from "./body.js";
import { protocolMismatch } from "./error-mapping.js";
import { type CallFacts, ProtocolError } from "./errors.js";

const KNOWN_TYPES = new Set<string>(["start", "stdout", "stderr", "heartbeat", "exit", "error"]);

export interface SseOptions extends CallFacts {
  signal: AbortSignal;
  /** Largest single event, in characters of its pending data (bounds what is buffered). */
  maxEventChars: number;
  status: number;
}

/**
 * Validated protocol events of an SSE body, pulled one chunk at a time: no more than one
 * network chunk of parsed events plus one partial event is ever held. Event types this
 * protocol version does not know are skipped (a newer bridge may add some).
 */
export async function* sseEvents(
  body: AsyncIterable<Uint8Array>,
  options: SseOptions,
): AsyncGenerator<StreamEvent> {
  const pending: EventSourceMessage[] = [];
  let overflow = false;
  const parser = createParser({
    maxBufferSize: options.maxEventChars,
    onEvent: (message) => pending.push(message),
    onError: (error) => {
      if (error.type === "max-buffer-size-exceeded") overflow = true;
    },
  });
  const decoder = new TextDecoder();
  const take = function* (): Generator<StreamEvent> {
    while (pending.length > 0) {
      const event = toEvent(pending.shift() as EventSourceMessage, options);
      if (event !== undefined) yield event;
    }
  };
  for await (const chunk of abortableChunks(body, options.signal)) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    if (overflow) {
      throw new ProtocolError(
        `The bridge sent a stream event larger than ${formatSize(options.maxEventChars)} (maxResponseBytes); stopped reading.`,
        errorFacts(options),
      );
    }
    yield* take();
  }
  parser.feed(decoder.decode());
  parser.reset({ consume: true });
  yield* take();
}

function toEvent(message: EventSourceMessage, options: SseOptions): StreamEvent | undefined {
  if (message.event !== undefined && !KNOWN_TYPES.has(message.event)) return undefined;
  let data: unknown;
  try {
    data = JSON.parse(message.data);
  } catch {
    throw new ProtocolError(
      `The bridge sent a stream event${message.event ? ` "${message.event}"` : ""} whose data is not JSON.`,
      errorFacts(options),
    );
  }
  const type = (data as { type?: unknown } | null)?.type;
  if (typeof type === "string" && !KNOWN_TYPES.has(type)) return undefined;
  const parsed = streamEventSchema.safeParse(data);
  if (!parsed.success) {
    throw protocolMismatch("a stream event", options.status, parsed.error, options);
  }
  if (message.event !== undefined && message.event !== parsed.data.type) {
    throw new ProtocolError(
      `The bridge sent a stream event named "${message.event}" carrying a "${parsed.data.type}" event.`,
      errorFacts(options),
    );
  }
  return parsed.data;
}

function errorFacts(options: SseOptions) {
  return { status: options.status, sandboxId: options.sandboxId, mayHaveRun: options.mayHaveRun };
}
