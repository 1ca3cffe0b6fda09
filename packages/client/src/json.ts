/**
 * Parsing an answer's bytes as JSON, without throwing: the callers decide what a body that is not
 * JSON means (a `ProtocolError`, or an error answer explained by its status alone).
 */

const decoder = new TextDecoder();

/** `{ok: true, value}` with the parsed JSON, or `{ok: false}` for bytes that are not JSON. */
export type ParsedJson = { ok: true; value: unknown } | { ok: false };

/** Parses UTF-8 JSON; never throws. */
export function parseJson(bytes: Uint8Array): ParsedJson {
  try {
    return { ok: true, value: JSON.parse(decoder.decode(bytes)) };
  } catch {
    return { ok: false };
  }
}
