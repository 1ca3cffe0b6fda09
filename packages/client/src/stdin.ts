import { toBase64 } from "@remote-task/internal";
import type { ExecRequest } from "@remote-task/protocol";

/** What a call may give as its command's standard input: text (sent as UTF-8) or bytes. */
export type StdinInput = string | Uint8Array | ArrayBuffer;

/** The request's `stdin` field and its size in bytes, or why `stdin` cannot be sent. */
export type StdinField =
  | { ok: true; value: NonNullable<ExecRequest["stdin"]>; bytes: number }
  | { ok: false; message: string };

const encoder = new TextEncoder();
/** In a `u` pattern a surrogate pair is one code point, so this matches only a lone surrogate. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** `stdin` as the protocol sends it: text as a string, bytes as `{base64}`. */
export function stdinField(stdin: unknown): StdinField {
  if (typeof stdin === "string") {
    // A lone surrogate has no UTF-8 form: the bridge would receive U+FFFD instead.
    if (LONE_SURROGATE.test(stdin)) {
      return {
        ok: false,
        message:
          "the text has a lone UTF-16 surrogate, which UTF-8 cannot carry; pass bytes instead",
      };
    }
    return { ok: true, value: stdin, bytes: encoder.encode(stdin).byteLength };
  }
  const bytes =
    stdin instanceof Uint8Array
      ? stdin
      : stdin instanceof ArrayBuffer
        ? new Uint8Array(stdin)
        : undefined;
  if (bytes === undefined) {
    return { ok: false, message: "must be a string, a Uint8Array or an ArrayBuffer" };
  }
  return { ok: true, value: { base64: toBase64(bytes) }, bytes: bytes.byteLength };
}
