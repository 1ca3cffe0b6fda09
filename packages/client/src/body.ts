/**
 * Reading an answer's body within a byte limit (a larger one is handed back unread, or refused),
 * and reading a JSON answer: whole, or for an exec result too large to hold, as it arrives
 * (`result-tail.ts`).
 */
import { concatBytes, raceAbort } from "@remote-task/internal";
import { formatSize } from "@remote-task/protocol";
import { type CallFacts, ProtocolError } from "./errors.js";
import { type ParsedJson, parseJson } from "./json.js";
import { readResultTail } from "./result-tail.js";
import { type CallAbort, raceCall } from "./scope.js";
import type { TransportResponse } from "./transport.js";

/**
 * The chunks of `body`, ending as soon as `signal` aborts (with its reason), even when the
 * underlying stream ignores the abort and would wait for ever.
 */
export async function* abortableChunks(
  body: AsyncIterable<Uint8Array>,
  signal: AbortSignal,
): AsyncGenerator<Uint8Array> {
  const iterator = body[Symbol.asyncIterator]();
  let finished = false;
  try {
    for (;;) {
      const next = await raceAbort(iterator.next(), signal);
      if (next.done) {
        finished = true;
        break;
      }
      yield next.value;
    }
  } finally {
    if (!finished) iterator.return?.()?.catch(() => {});
  }
  // A stream cancelled because of the abort ends like a complete one; report the abort instead.
  if (signal.aborted) throw signal.reason;
}

/**
 * A body read whole within the limit, or a body larger than the limit: then all of it as chunks
 * still to be read (those read before the limit was passed first).
 */
type BoundedBody =
  | { bytes: Uint8Array; larger?: undefined }
  | { bytes?: undefined; larger: AsyncIterable<Uint8Array> };

/**
 * Reads the body whole if it is at most `maxBytes`; a larger one is handed back unread past the
 * limit (a declared `Content-Length` over the limit is not read at all).
 */
async function readUpTo(
  response: TransportResponse,
  maxBytes: number,
  abort: CallAbort,
): Promise<BoundedBody> {
  const declared = declaredLength(response);
  if (declared !== undefined) {
    if (declared > maxBytes) return { larger: abortableChunks(response.body, abort.signal) };
    // The transport holds the body to its declared length, so reading it whole is bounded.
    const bytes = await raceCall(response.readAll(), abort);
    return bytes.byteLength > maxBytes ? { larger: replay([bytes], undefined) } : { bytes };
  }
  const iterator = abortableChunks(response.body, abort.signal);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const next = await iterator.next();
    if (next.done) return { bytes: concatBytes(chunks) };
    size += next.value.byteLength;
    chunks.push(next.value);
    if (size > maxBytes) return { larger: replay(chunks, iterator) };
  }
}

/**
 * The body's length from `Content-Length`, when it says how many bytes will be read: not for a
 * compressed body, which a Fetch implementation hands over decoded (and larger).
 */
function declaredLength(response: TransportResponse): number | undefined {
  const encoding = response.header("content-encoding");
  if (encoding !== undefined && !/^\s*identity\s*$/i.test(encoding)) return undefined;
  const declared = Number(response.header("content-length") ?? Number.NaN);
  return Number.isSafeInteger(declared) && declared >= 0 ? declared : undefined;
}

/** `read` chunks again (releasing each one as it goes), then the rest of `iterator`. */
async function* replay(
  read: Uint8Array[],
  iterator: AsyncIterator<Uint8Array> | undefined,
): AsyncGenerator<Uint8Array> {
  for (let chunk = read.shift(); chunk !== undefined; chunk = read.shift()) yield chunk;
  if (iterator === undefined) return;
  for (;;) {
    const next = await iterator.next();
    if (next.done) return;
    yield next.value;
  }
}

/** The error for a body over `maxBytes` that the client does not read. */
function tooLarge(maxBytes: number, context: CallFacts & { status: number }): ProtocolError {
  return new ProtocolError(
    `The bridge's response is larger than the ${formatSize(maxBytes)} limit (maxResponseBytes); stopped reading it. Check that the URL points at a remote-task bridge, or raise maxResponseBytes.`,
    context,
  );
}

/** Reads the whole body, refusing (with a `ProtocolError`) to hold more than `maxBytes`. */
export async function readBounded(
  response: TransportResponse,
  maxBytes: number,
  abort: CallAbort,
  context: CallFacts & { status: number },
): Promise<Uint8Array> {
  const body = await readUpTo(response, maxBytes, abort);
  if (body.larger !== undefined) throw tooLarge(maxBytes, context);
  return body.bytes;
}

/**
 * Reads a JSON answer. One larger than `maxBytes` is refused, unless `keptBytes` is given (an
 * exec result): then it is read as it arrives, keeping that many bytes of each output's end.
 */
export async function readJson(
  response: TransportResponse,
  limits: { maxBytes: number; keptBytes: number | undefined },
  abort: CallAbort,
  context: CallFacts & { status: number },
): Promise<ParsedJson> {
  const body = await readUpTo(response, limits.maxBytes, abort);
  if (body.larger === undefined) return parseJson(body.bytes);
  if (limits.keptBytes === undefined) throw tooLarge(limits.maxBytes, context);
  return readResultTail(body.larger, limits.keptBytes);
}
