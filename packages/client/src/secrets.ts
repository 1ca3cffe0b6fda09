/**
 * Values that must never appear in an error message (the token, `env` values). The bridge's text
 * is redacted before it is put into a message, by the project's one rule (see the internal
 * package's redact.ts): this project's own fixed texts that come back in it are kept as written.
 */
import { OWN_TEXTS, redact, shorten } from "@remote-task/internal";

/** The secrets of one call (see the top of this file). */
export class Secrets {
  readonly #values: ReadonlyArray<string | undefined>;
  constructor(values: ReadonlyArray<string | undefined>) {
    this.#values = values;
  }

  /** `text` from the bridge with every secret replaced and its length capped. */
  redact(text: string, maxLength = 500): string {
    return shorten(redact(text, this.#values, OWN_TEXTS), maxLength);
  }
}
