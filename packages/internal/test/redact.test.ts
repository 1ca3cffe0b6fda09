import { describe, expect, it } from "vitest";
import {
  MIN_SECRET_LENGTH,
  REDACTED,
  redact,
  shorten,
  WHOLE_WORD_SECRET_LENGTH,
} from "../src/redact.js";
import { BRIDGE_TEXTS, CLOUDFLARE_TEXTS, OWN_TEXTS, SANDBOX_TEXTS } from "../src/texts.js";

describe("redact", () => {
  it("replaces a secret as written and JSON-escaped", () => {
    const secret = 'a"b\nc';
    const text = `raw ${secret} escaped ${JSON.stringify(secret)} other`;
    expect(redact(text, [secret, ""])).toBe('raw [redacted] escaped "[redacted]" other');
  });

  it("replaces every occurrence, the longest secret first, overlapping ones as one", () => {
    expect(redact("token abc and abcdef and abc", ["abc", "abcdef"])).toBe(
      "token [redacted] and [redacted] and [redacted]",
    );
    // Neither `ef` of the second secret nor `ab` of the first is left.
    expect(redact("xx abcdef yy", ["abcd", "cdef"])).toBe("xx [redacted] yy");
    expect(redact("ababa", ["aba"])).toBe(REDACTED);
  });

  it("ignores values too short to be secrets, undefined ones and empty text", () => {
    expect(MIN_SECRET_LENGTH).toBe(3);
    expect(redact("a 1 ab", ["a", "1", "ab", undefined, ""])).toBe("a 1 ab");
    expect(redact("", ["secret"])).toBe("");
  });

  it("replaces a short secret only where it stands as a whole token, never inside a word", () => {
    const url = "see https://developers.cloudflare.com/containers/ for dev setup";
    expect(redact(url, ["dev"])).toBe(
      `see https://developers.cloudflare.com/containers/ for ${REDACTED} setup`,
    );
    expect(redact("Bearer dev, dev.example:dev/x (dev)", ["dev"])).toBe(
      `Bearer ${REDACTED}, ${REDACTED}.example:${REDACTED}/x (${REDACTED})`,
    );
    // Glued to a letter, a digit or `_` on either side it is part of a word; at the ends of the text it is not.
    expect(redact("devs undev dev2 my_dev", ["dev"])).toBe("devs undev dev2 my_dev");
    expect(redact("dev", ["dev"])).toBe(REDACTED);
    expect(redact("port 8080 not 18080", ["8080"])).toBe(`port ${REDACTED} not 18080`);
    // Letters beyond ASCII count as word characters too, those outside the BMP included.
    expect(redact("édev devé 𝐀dev dev", ["dev"])).toBe(`édev devé 𝐀dev ${REDACTED}`);
    // The JSON-escaped form follows the same rule.
    expect(redact('{"v":"a\\"b"} xa\\"b', ['a"b'])).toBe(`{"v":"${REDACTED}"} xa\\"b`);
  });

  it("replaces a long secret wherever it occurs, glued to other text or not", () => {
    const secret = "s3cr3t-t0k3n-0123";
    expect(secret.length).toBe(WHOLE_WORD_SECRET_LENGTH + 1);
    expect(redact(`Bearer${secret}x and _${secret}_`, [secret])).toBe(
      `Bearer${REDACTED}x and _${REDACTED}_`,
    );
    expect(redact(`id${"k".repeat(WHOLE_WORD_SECRET_LENGTH)}z`, ["k".repeat(16)])).toBe(
      `id${REDACTED}z`,
    );
  });

  it("never leaves part of secrets that together make one word", () => {
    // Each alone is inside the word, but together they are the whole of it.
    expect(redact("abcdef", ["abc", "def"])).toBe(REDACTED);
    expect(redact("x abcdef y", ["abc", "cdef"])).toBe(`x ${REDACTED} y`);
    // A word they do not fill is left as written.
    expect(redact("abcdefg", ["abc", "def"])).toBe("abcdefg");
  });

  it("never rewrites a kept text, but redacts the same secret outside it", () => {
    const fixed = "Missing or wrong bearer token; send Authorization: Bearer <token>.";
    expect(redact(fixed, ["wrong"], [fixed])).toBe(fixed);
    expect(redact(`${fixed} You sent wrong.`, ["wrong"], [fixed])).toBe(
      `${fixed} You sent ${REDACTED}.`,
    );
    // A secret reaching beyond the kept text is redacted whole.
    expect(redact(`${fixed}wrong`, [">.wrong"], [fixed])).toBe(`${fixed.slice(0, -2)}${REDACTED}`);
  });
});

describe("the project's own texts", () => {
  it("survive redaction with any word of theirs as a secret", () => {
    // Each text with the values put into it, which are not the project's and stay redactable.
    const texts: Array<[string, string[]]> = [
      [BRIDGE_TEXTS.unauthorized, []],
      [BRIDGE_TEXTS.notConfigured, []],
      [BRIDGE_TEXTS.conflict("mikan-task-1"), ["mikan-task-1"]],
      [BRIDGE_TEXTS.notFound("/nope", "/health, /exec"), ["/nope", "/health", "/exec"]],
      [CLOUDFLARE_TEXTS.containersDisabled, []],
      [CLOUDFLARE_TEXTS.failed(undefined, ""), []],
      [CLOUDFLARE_TEXTS.failed("SOME_CODE", ""), ["SOME_CODE"]],
      [SANDBOX_TEXTS.alreadyExists("mikan-task-1"), ["mikan-task-1"]],
    ];
    for (const [text, values] of texts) {
      const words = text
        .split(/[\s;:,.`()]+/)
        .filter((word) => word.length >= MIN_SECRET_LENGTH && !values.includes(word));
      expect(words.length).toBeGreaterThan(0);
      expect(redact(text, words, OWN_TEXTS)).toBe(text);
    }
    // The worker README's own example token, and the wrong token of a failed login.
    expect(redact(CLOUDFLARE_TEXTS.containersDisabled, ["dev"], OWN_TEXTS)).toContain(
      "wrangler dev --enable-containers",
    );
  });

  it("keep the values put into them redactable", () => {
    const text = CLOUDFLARE_TEXTS.failed("E_CODE", "env value hunter2 refused");
    expect(redact(text, ["hunter2"], OWN_TEXTS)).toBe(
      "The sandbox failed (E_CODE): env value [redacted] refused",
    );
    expect(redact(BRIDGE_TEXTS.notFound("/exec/hunter2", "/exec"), ["hunter2"], OWN_TEXTS)).toBe(
      "No route /exec/[redacted]; routes are /exec.",
    );
  });

  it("are listed with their fixed parts, for texts with values too", () => {
    expect(OWN_TEXTS).toContain(BRIDGE_TEXTS.unauthorized);
    expect(OWN_TEXTS).toContain("Sandbox id ");
    expect(OWN_TEXTS).toContain(" is already in use by a running call; use a fresh id per call.");
    expect(OWN_TEXTS).toContain("The sandbox failed");
    expect(OWN_TEXTS.every((text) => !text.includes("\u0000"))).toBe(true);
  });
});

describe("shorten", () => {
  it("cuts long text with an ellipsis and leaves short text alone", () => {
    expect(shorten("abcdef", 3)).toBe("abc…");
    expect(shorten("abc", 3)).toBe("abc");
  });
});
