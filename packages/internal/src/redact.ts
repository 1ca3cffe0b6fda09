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
 *   escaped). Overlapping or touching occurrences of secrets become one `[redacted]`, so no part
 *   of either is left.
 * - A secret is replaced where it stands as a whole token, not inside an ordinary word: an
 *   occurrence (with those it overlaps or touches) is left alone when it continues a word at
 *   either end, that is a letter, digit or `_` of it stands next to another one. So the token
 *   `dev` is redacted in `Bearer dev` and `dev.example`, but `developers` stays as written.
 *   A secret of {@link WHOLE_WORD_SECRET_LENGTH} characters or more (as written or escaped) is
 *   replaced wherever it occurs, glued to other text or not: no ordinary word contains one by
 *   chance, so an occurrence is the secret itself and must never show. (A bridge token shorter
 *   than that is too weak anyway: the bridge warns about one when it starts.)
 */

/** What a secret is replaced with. */
export const REDACTED = "[redacted]";

/** Shortest value treated as a secret. */
export const MIN_SECRET_LENGTH = 3;

/**
 * Shortest secret replaced even inside a word (see the rule above). Shorter secrets are replaced
 * only where they stand as a whole token.
 */
export const WHOLE_WORD_SECRET_LENGTH = 16;

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

const ENDS_IN_WORD = /[\p{L}\p{N}_]$/u;
const STARTS_WITH_WORD = /^[\p{L}\p{N}_]/u;

/** Whether `text` has word characters (a letter, digit or `_`) on both sides of `at`. */
function joinedAt(text: string, at: number): boolean {
  if (at <= 0 || at >= text.length) return false;
  // Two code units on each side: enough for a character outside the Basic Multilingual Plane.
  return (
    ENDS_IN_WORD.test(text.slice(Math.max(0, at - 2), at)) &&
    STARTS_WITH_WORD.test(text.slice(at, at + 2))
  );
}

/** Whether `text[start, end)` continues a word at either end (it is part of a longer word). */
function insideWord(text: string, start: number, end: number): boolean {
  return joinedAt(text, start) || joinedAt(text, end);
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
  // Runs of overlapping or touching hits, each replaced whole or left whole.
  const runs: Array<{ start: number; end: number; long: boolean }> = [];
  for (const [start, end] of hits) {
    const long = end - start >= WHOLE_WORD_SECRET_LENGTH;
    const last = runs.at(-1);
    if (last !== undefined && start <= last.end) {
      last.end = Math.max(last.end, end);
      last.long ||= long;
    } else {
      runs.push({ start, end, long });
    }
  }
  let out = "";
  let done = 0;
  for (const { start, end, long } of runs) {
    if (!long && insideWord(text, start, end)) continue;
    out += `${text.slice(done, start)}${REDACTED}`;
    done = end;
  }
  return out + text.slice(done);
}

/** `text` cut to `maxLength` characters, with `…` where it was cut. */
export function shorten(text: string, maxLength: number): string {
  return text.length > maxLength ? `${text.slice(0, maxLength)}…` : text;
}
