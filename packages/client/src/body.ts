import { concatBytes, raceAbort } from "@remote-task/internal";
import { formatSize } from "@remote-task/protocol";
import { ProtocolError } from "./errors.js";
import type { CallFacts } from "./responses.js";
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

/** Reads the whole body, refusing (with a `ProtocolError`) to hold more than `maxBytes`. */
export async function readBounded(
  response: TransportResponse,
  maxBytes: number,
  signal: AbortSignal,
  context: CallFacts & { status: number },
): Promise<Uint8Array> {
  const tooLarge = () =>
    new ProtocolError(
      `The bridge's response is larger than the ${formatSize(maxBytes)} limit (maxResponseBytes); stopped reading it. Check that the URL points at a remote-task bridge, or raise maxResponseBytes.`,
      context,
    );
  const declared = Number(response.header("content-length") ?? Number.NaN);
  if (Number.isSafeInteger(declared) && declared >= 0) {
    if (declared > maxBytes) throw tooLarge();
    // The transport holds the body to its declared length, so reading it whole is bounded.
    const bytes = await raceAbort(response.readAll(), signal);
    if (bytes.byteLength > maxBytes) throw tooLarge();
    return bytes;
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of abortableChunks(response.body, signal)) {
    size += chunk.byteLength;
    if (size > maxBytes) throw tooLarge();
    chunks.push(chunk);
  }
  return concatBytes(chunks);
}

const decoder = new TextDecoder();

/** `{ok: true, value}` with the parsed JSON, or `{ok: false}` for bytes that are not JSON. */
export function parseJson(bytes: Uint8Array): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(decoder.decode(bytes)) };
  } catch {
    return { ok: false };
  }
}
