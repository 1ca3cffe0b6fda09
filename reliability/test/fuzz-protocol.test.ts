import {
  cancelRequestSchema,
  cancelResponseSchema,
  errorBodySchema,
  execRequestSchema,
  execResultSchema,
  formatOutput,
  formatSize,
  healthResponseSchema,
  NO_OUTPUT_TEXT,
  streamEventSchema,
  truncateTail,
  utf8ByteLength,
} from "@remote-task/protocol";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type * as z from "zod";
import { fuzzParameters, hostileText } from "./support/fuzz.js";

const number = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -0, 1, 124, 2 ** 31, Number.MAX_SAFE_INTEGER, 1e308, 5e-324, -1),
);
const idLike = fc.oneof(
  fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/),
  fc.constantFrom("mikan-task-1", "a", "-a", "A", ""),
  hostileText,
);
const envName = fc.oneof(
  fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,12}$/),
  fc.constantFrom("__proto__", "constructor", "toString", "PATH", "1X", "A-B", ""),
);
/** Mostly a valid value, sometimes a hostile one, so both sides of the schema are reached. */
const mostly = <T, U>(valid: fc.Arbitrary<T>, hostile: fc.Arbitrary<U>) =>
  fc.oneof({ weight: 5, arbitrary: valid }, { weight: 1, arbitrary: hostile });
const validId = fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/);
const positive = fc.oneof(fc.double({ min: 5e-324, noNaN: true }), fc.integer({ min: 1 }));
const natural = fc.oneof(fc.nat(), fc.constantFrom(0, Number.MAX_SAFE_INTEGER));
const text = hostileText;

/** Values shaped like each wire message, valid or nearly so, with hostile field values. */
const candidates: Record<string, [z.ZodType, fc.Arbitrary<unknown>]> = {
  execRequest: [
    execRequestSchema,
    fc.record(
      {
        sandboxId: mostly(validId, idLike),
        command: mostly(
          text.map((t) => `x${t}`),
          text,
        ),
        timeoutSeconds: mostly(positive, number),
        cwd: mostly(
          text.map((t) => `/${t}`),
          text,
        ),
        env: mostly(
          fc.dictionary(fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,12}$/), text, { maxKeys: 6 }),
          fc.dictionary(envName, text, { maxKeys: 6 }),
        ),
        maxOutputBytes: mostly(fc.integer({ min: 1 }), number),
      },
      { requiredKeys: ["sandboxId", "command"] },
    ),
  ],
  execResult: [
    execResultSchema,
    fc.record(
      {
        stdout: hostileText,
        stderr: hostileText,
        code: mostly(fc.integer(), number),
        outcome: mostly(fc.constantFrom("exited", "timeout", "cancelled"), fc.constant("other")),
        durationMs: mostly(fc.double({ min: 0, noNaN: true }), number),
        stdoutBytes: mostly(natural, number),
        stderrBytes: mostly(natural, number),
        stdoutTruncated: fc.boolean(),
        stderrTruncated: fc.boolean(),
      },
      { requiredKeys: ["stdout", "stderr", "code"] },
    ),
  ],
  errorBody: [
    errorBodySchema,
    fc.record(
      {
        error: hostileText,
        code: mostly(
          fc.constantFrom("unauthorized", "invalid_request", "internal", "sandbox_error"),
          fc.constant("nope"),
        ),
        issues: fc.array(
          fc.record({
            path: fc.array(mostly(fc.oneof(text, fc.integer()), number)),
            message: text,
          }),
          { maxLength: 3 },
        ),
        retryAfterSeconds: mostly(fc.double({ min: 0, noNaN: true }), number),
      },
      { requiredKeys: ["error", "code"] },
    ),
  ],
  health: [
    healthResponseSchema,
    fc.record(
      {
        ok: mostly(fc.constant(true), fc.constant(false)),
        protocol: mostly(fc.integer({ min: 1 }), number),
        backend: hostileText,
        isolation: hostileText,
        version: hostileText,
      },
      { requiredKeys: ["ok"] },
    ),
  ],
  cancelRequest: [cancelRequestSchema, fc.record({ sandboxId: mostly(validId, idLike) })],
  cancelResponse: [
    cancelResponseSchema,
    fc.record({
      ok: fc.constant(true),
      sandboxId: mostly(validId, idLike),
      cancelled: fc.boolean(),
    }),
  ],
  streamEvent: [
    streamEventSchema,
    fc.oneof(
      fc.record({
        type: fc.constant("start"),
        sandboxId: mostly(validId, idLike),
        protocol: mostly(fc.integer({ min: 1 }), number),
      }),
      fc.record({ type: fc.constantFrom("stdout", "stderr"), data: hostileText }),
      fc.record({
        type: fc.constant("heartbeat"),
        elapsedMs: mostly(fc.double({ min: 0, noNaN: true }), number),
      }),
      fc.record({
        type: fc.constant("exit"),
        result: fc.record({ stdout: text, stderr: text, code: mostly(fc.integer(), number) }),
      }),
      fc.record({
        type: fc.constant("error"),
        error: fc.record({ error: text, code: mostly(fc.constant("internal"), fc.constant("x")) }),
      }),
    ),
  ],
};

describe("protocol schemas survive the wire", () => {
  for (const [name, [schema, arbitrary]] of Object.entries(candidates)) {
    it(`${name}: any value the schema accepts survives JSON.stringify/parse and re-parses equal`, () => {
      let accepted = 0;
      fc.assert(
        fc.property(arbitrary, (candidate) => {
          const parsed = schema.safeParse(candidate);
          if (!parsed.success) return;
          accepted++;
          const wire = JSON.stringify(parsed.data);
          const again = schema.safeParse(JSON.parse(wire));
          expect(again.success).toBe(true);
          // Equal as the wire sees it (-0 and 0 are one JSON number).
          expect(JSON.stringify(again.data)).toBe(wire);
        }),
        fuzzParameters(400),
      );
      // The generators must reach the accepting side, or the property proves nothing.
      expect(accepted).toBeGreaterThan(50);
    });
  }
});

describe("formatOutput agrees with truncateTail", () => {
  const limits = fc.record({
    maxBytes: fc.integer({ min: 0, max: 200 }),
    maxLines: fc.integer({ min: 1, max: 8 }),
  });

  it("shows the joined output whole when it fits, else truncateTail's tail plus a notice", () => {
    fc.assert(
      fc.property(hostileText, hostileText, limits, (stdout, stderr, options) => {
        const joined = stdout && stderr ? `${stdout}\n${stderr}` : stdout || stderr;
        const shown = formatOutput({ stdout, stderr }, options);
        const cut = truncateTail(joined, options);
        if (joined === "") {
          expect(shown).toEqual({ text: NO_OUTPUT_TEXT, truncated: false });
        } else if (!cut.truncated) {
          expect(shown).toEqual({ text: joined, truncated: false });
        } else {
          expect(shown.truncated).toBe(true);
          expect(shown.text.startsWith(`${cut.text || NO_OUTPUT_TEXT}\n\n[Showing the last `)).toBe(
            true,
          );
        }
      }),
      fuzzParameters(500),
    );
  });

  it("always marks output truncated when the bridge kept only a tail (byte totals larger than the text)", () => {
    fc.assert(
      fc.property(
        hostileText,
        hostileText,
        fc.nat(10_000),
        fc.nat(10_000),
        limits,
        (stdout, stderr, moreOut, moreErr, options) => {
          fc.pre(moreOut + moreErr > 0);
          const stdoutBytes = utf8ByteLength(stdout) + moreOut;
          const stderrBytes = utf8ByteLength(stderr) + moreErr;
          const shown = formatOutput({ stdout, stderr, stdoutBytes, stderrBytes }, options);
          expect(shown.truncated).toBe(true);
          // The notice reports the command's real total, never the retained length, and names
          // the limit that cut: the line limit where the text had more lines, else the bytes.
          const joinedTotal =
            stdoutBytes + stderrBytes + (stdoutBytes > 0 && stderrBytes > 0 ? 1 : 0);
          const limits = [
            `(${formatSize(options.maxBytes)} limit)`,
            `(${options.maxLines}-line limit)`,
          ].map((limit) => ` of ${formatSize(joinedTotal)} ${limit}.`);
          expect(
            limits.some((notice) => shown.text.includes(notice)),
            shown.text,
          ).toBe(true);
        },
      ),
      fuzzParameters(500),
    );
  });
});
