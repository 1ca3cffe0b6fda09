import {
  BRIDGE_TEXTS,
  concatBytes,
  issuesInWords,
  issuesOf,
  type SchemaIssue,
} from "@remote-task/internal";
import { HttpError, invalidRequest } from "./responses.js";

function tooLarge(maxBytes: number): HttpError {
  return new HttpError("payload_too_large", BRIDGE_TEXTS.payloadTooLarge(maxBytes), {
    headers: { connection: "close" },
  });
}

/** A body that broke off before its end (the client gave up on its upload). */
function bodyBrokenOff(): never {
  throw invalidRequest(BRIDGE_TEXTS.unreadableRequest, [
    { path: [], message: BRIDGE_TEXTS.bodyBrokenOffIssue },
  ]);
}

/**
 * Reads the body, refusing it as soon as it passes `maxBytes`: a declared Content-Length over it
 * is refused unread; one within it is read whole (on the wire that header frames the body: the
 * HTTP server or the platform ends it there, so only a Request built in-process could carry more,
 * and it is refused once read); a body without one (chunked) is read as a stream and refused as
 * soon as it passes the limit, so never more than `maxBytes` of it is held. A body that breaks
 * off (the client gave up on its upload) is a refused request like any other, not a bridge
 * failure: nothing is logged.
 */
export async function readBodyLimited(request: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  const length = declared !== null && /^\d+$/.test(declared.trim()) ? Number(declared) : undefined;
  if (length !== undefined && length > maxBytes) {
    await request.body?.cancel().catch(() => {});
    throw tooLarge(maxBytes);
  }
  if (length !== undefined) {
    // Read whole, without a stream where the host can (the Node host's direct read).
    const bytes = new Uint8Array(await request.arrayBuffer().catch(bodyBrokenOff));
    if (bytes.byteLength > maxBytes) throw tooLarge(maxBytes);
    return bytes;
  }
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    let next: ReadableStreamReadResult<Uint8Array>;
    try {
      next = await reader.read();
    } catch {
      bodyBrokenOff();
    }
    const { done, value } = next;
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge(maxBytes);
    }
    parts.push(value);
  }
  return concatBytes(parts);
}

const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Refuses bodies declared as something other than JSON (forms, multipart, binary). A missing type
 * and `text/plain` are read as JSON: `fetch` labels a string body `text/plain` unless told
 * otherwise, and the reference bridge accepted such clients.
 */
export function assertJsonContentType(request: Request): void {
  const type = request.headers.get("content-type");
  if (type === null) return;
  const mediaType = type.split(";")[0]?.trim().toLowerCase() ?? "";
  const json =
    mediaType === "application/json" ||
    mediaType === "text/plain" ||
    /^application\/[a-z0-9.+-]*\+json$/.test(mediaType);
  if (!json) {
    throw invalidRequest(BRIDGE_TEXTS.notJsonType, [
      { path: [], message: BRIDGE_TEXTS.unsupportedType(mediaType.slice(0, 100)) },
    ]);
  }
}

/** Parses a UTF-8 JSON body; 400 with `issues` when it is not JSON. */
export function parseJsonBody(bytes: Uint8Array): unknown {
  let text: string;
  try {
    text = strictDecoder.decode(bytes);
  } catch {
    throw invalidRequest(BRIDGE_TEXTS.notUtf8, [{ path: [], message: BRIDGE_TEXTS.notUtf8Issue }]);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalidRequest(BRIDGE_TEXTS.notJson, [{ path: [], message: BRIDGE_TEXTS.notJsonIssue }]);
  }
}

/** The part of a zod schema the bridge uses (kept structural so zod stays the protocol's business). */
interface Schema<T> {
  safeParse(
    value: unknown,
  ): { success: true; data: T } | { success: false; error: { issues: ReadonlyArray<SchemaIssue> } };
}

/** Validates `value` with `schema`; 400 `invalid_request` with every failing path otherwise. */
export function validate<T>(schema: Schema<T>, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = issuesOf(parsed.error);
    throw invalidRequest(BRIDGE_TEXTS.invalid(what, issuesInWords(issues)), issues);
  }
  return parsed.data;
}
