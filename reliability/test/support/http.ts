import { connect } from "node:net";
import {
  cancelResponseSchema,
  ERROR_STATUS,
  errorBodySchema,
  execResultSchema,
  healthResponseSchema,
  type StreamEvent,
  streamEventSchema,
} from "@remote-task/protocol";
import { expect } from "vitest";

export interface RawAnswer {
  status: number;
  contentType: string;
  text: string;
}

/** Asserts `answer` is a protocol answer for `path`, never a 500; returns the parsed events or value. */
export function expectProtocolAnswer(path: string, method: string, answer: RawAnswer): unknown {
  expect(answer.status, answer.text.slice(0, 300)).not.toBe(500);
  expect(answer.status).toBeLessThan(600);
  if (method === "HEAD") return undefined;
  if (answer.status >= 400) {
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(answer.status).toBe(ERROR_STATUS[body.code]);
    return body;
  }
  expect(answer.status).toBe(200);
  if (answer.contentType.startsWith("text/event-stream")) return parseEvents(answer.text);
  const json: unknown = JSON.parse(answer.text);
  const route = new URL(path, "http://x").pathname;
  if (route === "/exec") return execResultSchema.parse(json);
  if (route === "/cancel") return cancelResponseSchema.parse(json);
  if (route === "/health") return healthResponseSchema.parse(json);
  expect(json).toHaveProperty("openapi");
  return json;
}

/** Every SSE frame validated against the protocol; the stream starts with `start` and ends with `exit` or `error`. */
export function parseEvents(text: string): StreamEvent[] {
  expect(text.endsWith("\n\n")).toBe(true);
  const events = text
    .slice(0, -2)
    .split("\n\n")
    .map((frame) => {
      const [eventLine, dataLine, ...rest] = frame.split("\n");
      expect(rest).toEqual([]);
      const event = streamEventSchema.parse(JSON.parse((dataLine ?? "").replace(/^data: /, "")));
      expect(eventLine).toBe(`event: ${event.type}`);
      return event;
    });
  expect(events[0]?.type).toBe("start");
  expect(["exit", "error"]).toContain(events[events.length - 1]?.type);
  return events;
}

/**
 * Writes raw bytes to host:port, half-closes, and collects what comes back until the server
 * closes or `limitMs` passes. Returns the bytes (possibly empty).
 */
export function rawExchange(port: number, bytes: Uint8Array, limitMs = 3_000): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, "127.0.0.1");
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(Buffer.concat(chunks));
    };
    const timer = setTimeout(done, limitMs);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", done);
    socket.on("close", done);
    socket.end(bytes);
  });
}

/** The first HTTP response in `raw`: status, headers, and the body when Content-Length frames it. */
export function firstResponse(raw: Buffer): {
  status: number;
  headers: Record<string, string>;
  body?: string;
} {
  const text = raw.toString("latin1");
  const headEnd = text.indexOf("\r\n\r\n");
  expect(headEnd, text.slice(0, 200)).toBeGreaterThan(0);
  const [statusLine = "", ...headerLines] = text.slice(0, headEnd).split("\r\n");
  const match = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine);
  expect(match, statusLine).not.toBeNull();
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const length = headers["content-length"];
  const rest = raw.subarray(Buffer.byteLength(text.slice(0, headEnd + 4), "latin1"));
  const body = length === undefined ? undefined : rest.subarray(0, Number(length)).toString("utf8");
  return { status: Number(match?.[1]), headers, ...(body === undefined ? {} : { body }) };
}
