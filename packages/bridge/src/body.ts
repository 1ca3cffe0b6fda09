import type { Issue } from "@remote-task/protocol";
import { errorBody, HttpError, invalidRequest } from "./responses.js";

function tooLarge(maxBytes: number): HttpError {
  return new HttpError(
    errorBody(
      "payload_too_large",
      `Request body is larger than ${maxBytes} bytes; send a shorter command or fewer env entries.`,
    ),
    { connection: "close" },
  );
}

/**
 * Reads the body, refusing it as soon as it passes `maxBytes` (Content-Length is checked first
 * but not trusted): never more than `maxBytes` is held.
 */
export async function readBodyLimited(request: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > maxBytes) {
    await request.body?.cancel().catch(() => {});
    throw tooLarge(maxBytes);
  }
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge(maxBytes);
    }
    parts.push(value);
  }
  const body = new Uint8Array(size);
  let offset = 0;
  for (const part of parts) {
    body.set(part, offset);
    offset += part.byteLength;
  }
  return body;
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
    throw invalidRequest("Content-Type must be application/json.", [
      { path: [], message: `unsupported content type "${mediaType.slice(0, 100)}"` },
    ]);
  }
}

/** Parses a UTF-8 JSON body; 400 with `issues` when it is not JSON. */
export function parseJsonBody(bytes: Uint8Array): unknown {
  let text: string;
  try {
    text = strictDecoder.decode(bytes);
  } catch {
    throw invalidRequest("Request body is not valid UTF-8.", [
      { path: [], message: "body must be UTF-8 encoded JSON" },
    ]);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalidRequest("Request body is not valid JSON.", [
      { path: [], message: "body must be a JSON object" },
    ]);
  }
}

/** The part of a zod schema the bridge uses (kept structural so zod stays the protocol's business). */
interface Schema<T> {
  safeParse(value: unknown):
    | { success: true; data: T }
    | {
        success: false;
        error: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> };
      };
}

/** Protocol issues from a zod error (paths made JSON-safe). */
export function zodIssues(error: {
  issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>;
}): Issue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map((key) => (typeof key === "symbol" ? String(key) : key)),
    message: issue.message,
  }));
}

/** Validates `value` with `schema`; 400 `invalid_request` with every failing path otherwise. */
export function validate<T>(schema: Schema<T>, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw invalidRequest(`${what} is invalid: see issues.`, zodIssues(parsed.error));
  }
  return parsed.data;
}
