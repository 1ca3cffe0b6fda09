/*
 * The redaction rule, the same in the bridge, its backends and the client:
 *
 * - Secrets are the bridge token (the configured one and the one a request presents) and the
 *   `env` values of a call. Values shorter than {@link MIN_SECRET_LENGTH} characters are not
 *   treated as secrets: redaction cannot keep them secret (they are guessed in a few tries) and
 *   replacing them would blank out ordinary letters and digits.
 * - Redaction applies only to text that can carry a secret: what a backend, an SDK or the
 *   operating system reported, a value echoed back from a request, and a bridge's answer as the
 *   client reads it. A message the project composes is never run through it as a whole; text
 *   from outside goes through it before it is put into the message.
 * - The project's own texts are never rewritten. Where such text can come back inside foreign
 *   text (a bridge's answer read by the client), an occurrence of a secret lying wholly inside
 *   one of the fixed texts is left alone: that text reads the same whatever the secret is, so it
 *   reveals nothing. The fixed texts are listed in `texts.ts`. (A secret that is itself a piece
 *   of those texts, such as the token `wrong`, stays visible only where it stands inside one.)
 * - A secret is replaced as written and in its JSON-escaped form (messages often quote values
 *   escaped). Overlapping occurrences of different secrets become one `[redacted]`, so no part of
 *   either is left.
 */

/** What a secret is replaced with. */
export const REDACTED = "[redacted]";

/** Shortest value treated as a secret. */
export const MIN_SECRET_LENGTH = 3;

/** The forms a secret is searched for in: as written and JSON-escaped. */
function formsOf(secrets: Iterable<string | undefined>): string[] {
  const forms = new Set<string>();
  for (const secret of secrets) {
    if (typeof secret !== "string" || secret.length < MIN_SECRET_LENGTH) continue;
    forms.add(secret);
    forms.add(JSON.stringify(secret).slice(1, -1));
  }
  return [...forms];
}

/** Start and end of every occurrence of `needle` in `text`, overlapping ones included. */
function occurrences(text: string, needle: string): Array<[number, number]> {
  const found: Array<[number, number]> = [];
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) {
    found.push([at, at + needle.length]);
  }
  return found;
}

/**
 * `text` with every secret replaced by `[redacted]`, except occurrences lying wholly inside an
 * occurrence of one of `keep` (the project's own fixed texts).
 */
export function redact(
  text: string,
  secrets: Iterable<string | undefined>,
  keep: Iterable<string> = [],
): string {
  const forms = formsOf(secrets);
  if (forms.length === 0 || text.length === 0) return text;
  let hits: Array<[number, number]> = forms.flatMap((form) => occurrences(text, form));
  if (hits.length === 0) return text;
  const kept: Array<[number, number]> = [];
  for (const fixed of keep) if (fixed.length > 0) kept.push(...occurrences(text, fixed));
  if (kept.length > 0) {
    hits = hits.filter(([start, end]) => !kept.some(([from, to]) => from <= start && end <= to));
  }
  hits.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  let out = "";
  let done = 0;
  for (const [start, end] of hits) {
    if (end <= done) continue;
    if (start >= done) out += `${text.slice(done, start)}${REDACTED}`;
    done = end;
  }
  return out + text.slice(done);
}

/** `text` cut to `maxLength` characters, with `…` where it was cut. */
export function shorten(text: string, maxLength: number): string {
  return text.length > maxLength ? `${text.slice(0, maxLength)}…` : text;
}
