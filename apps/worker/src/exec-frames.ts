/**
 * The byte stream a `TaskContainer` returns for one command: its stdout and stderr bytes as they
 * come, then how it ended, each in a frame of one type byte, a 4-byte big-endian length and the
 * payload. One stream carries everything over Durable Object RPC (which passes byte streams but
 * not promises), with the output's bytes intact so the bridge counts them exactly.
 */

const FRAME_STDOUT = 1;
const FRAME_STDERR = 2;
/** Payload: the exit code, a 4-byte big-endian signed integer. */
const FRAME_EXIT = 3;
/** Payload: a message (UTF-8) safe to show to the caller. */
const FRAME_ERROR = 4;

type FrameType = typeof FRAME_STDOUT | typeof FRAME_STDERR | typeof FRAME_EXIT | typeof FRAME_ERROR;

export type Frame =
  | { type: "stdout" | "stderr"; data: Uint8Array }
  | { type: "exit"; code: number }
  | { type: "error"; message: string };

const HEADER_BYTES = 5;

function frame(type: FrameType, payload: Uint8Array): Uint8Array {
  const bytes = new Uint8Array(HEADER_BYTES + payload.byteLength);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, type);
  view.setUint32(1, payload.byteLength);
  bytes.set(payload, HEADER_BYTES);
  return bytes;
}

export function outputFrame(stream: "stdout" | "stderr", data: Uint8Array): Uint8Array {
  return frame(stream === "stdout" ? FRAME_STDOUT : FRAME_STDERR, data);
}

export function exitFrame(code: number): Uint8Array {
  const payload = new Uint8Array(4);
  new DataView(payload.buffer).setInt32(0, code);
  return frame(FRAME_EXIT, payload);
}

export function errorFrame(message: string): Uint8Array {
  return frame(FRAME_ERROR, new TextEncoder().encode(message));
}

/** The frames of `stream`, in order; a stream that ends inside a frame throws. */
export async function* readFrames(stream: AsyncIterable<Uint8Array>): AsyncGenerator<Frame> {
  let buffer: Uint8Array = new Uint8Array(0);
  for await (const chunk of stream) {
    buffer = buffer.byteLength === 0 ? chunk : concat(buffer, chunk);
    while (buffer.byteLength >= HEADER_BYTES) {
      const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      const type = view.getUint8(0);
      const length = view.getUint32(1);
      if (buffer.byteLength < HEADER_BYTES + length) break;
      const payload = buffer.subarray(HEADER_BYTES, HEADER_BYTES + length);
      buffer = buffer.subarray(HEADER_BYTES + length);
      yield decode(type, payload);
    }
  }
  if (buffer.byteLength > 0) throw new Error("the output stream ended inside a frame");
}

function decode(type: number, payload: Uint8Array): Frame {
  switch (type) {
    case FRAME_STDOUT:
      return { type: "stdout", data: payload };
    case FRAME_STDERR:
      return { type: "stderr", data: payload };
    case FRAME_EXIT:
      return {
        type: "exit",
        code: new DataView(payload.buffer, payload.byteOffset, payload.byteLength).getInt32(0),
      };
    case FRAME_ERROR:
      return { type: "error", message: new TextDecoder().decode(payload) };
    default:
      throw new Error(`unknown frame type ${type}`);
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const joined = new Uint8Array(a.byteLength + b.byteLength);
  joined.set(a, 0);
  joined.set(b, a.byteLength);
  return joined;
}
