import { type StreamEvent, streamEventSchema } from "@remote-task/protocol";
import { EventSourceParserStream } from "eventsource-parser/stream";

export interface StreamEventReader {
  /** The next event (validated against the protocol), or `undefined` when the stream ended. */
  next(): Promise<StreamEvent | undefined>;
  /** Every remaining event. */
  all(): Promise<StreamEvent[]>;
  /** Stops reading, as a client that goes away does. */
  cancel(): Promise<void>;
}

/**
 * Reads a bridge's SSE answer one protocol event at a time. Each event is checked: its `data`
 * parses as a `StreamEvent` and its SSE `event` name equals the event's `type`.
 */
export function readStreamEvents(response: Response): StreamEventReader {
  if (response.body === null) throw new TypeError("The response has no body to read events from.");
  const reader = response.body
    .pipeThrough(new TextDecoderStream())
    .pipeThrough(new EventSourceParserStream())
    .getReader();
  const next = async (): Promise<StreamEvent | undefined> => {
    const { done, value } = await reader.read();
    if (done) return undefined;
    const event = streamEventSchema.parse(JSON.parse(value.data));
    if (value.event !== event.type) {
      throw new Error(`SSE event name "${value.event}" does not match its type "${event.type}".`);
    }
    return event;
  };
  return {
    next,
    async all() {
      const events: StreamEvent[] = [];
      for (let event = await next(); event; event = await next()) events.push(event);
      return events;
    },
    cancel: () => reader.cancel(),
  };
}
