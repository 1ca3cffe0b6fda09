import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  assertSandboxIdPrefix,
  isSandboxId,
  newSandboxId,
  SANDBOX_ID_PREFIX_MAX_LENGTH,
} from "../src/index.js";

describe("sandbox ids", () => {
  it("defaults to mikan-task-<uuid v4>", () => {
    const id = newSandboxId();
    expect(id).toMatch(
      /^mikan-task-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(isSandboxId(id)).toBe(true);
  });

  it("is fresh on every call", () => {
    const ids = new Set(Array.from({ length: 1000 }, () => newSandboxId()));
    expect(ids.size).toBe(1000);
  });

  it("accepts the longest legal prefix and refuses a longer one", () => {
    const longest = "p".repeat(SANDBOX_ID_PREFIX_MAX_LENGTH);
    expect(newSandboxId(longest)).toHaveLength(63);
    expect(() => newSandboxId(`${longest}p`)).toThrow(/at most 26/);
  });

  it("refuses illegal prefixes with a reason", () => {
    for (const prefix of ["", "Upper", "-lead", "trail-", "under_score", "sp ace"]) {
      expect(() => assertSandboxIdPrefix(prefix)).toThrow(TypeError);
    }
  });

  it("every id from a legal prefix is valid", () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,24}[a-z0-9])?$/), (prefix) => {
        expect(isSandboxId(newSandboxId(prefix))).toBe(true);
      }),
    );
  });

  it("validates ids by the id rules", () => {
    expect(isSandboxId("a")).toBe(true);
    expect(isSandboxId("a".repeat(63))).toBe(true);
    expect(isSandboxId("a".repeat(64))).toBe(false);
    expect(isSandboxId("")).toBe(false);
    expect(isSandboxId("-a")).toBe(false);
    expect(isSandboxId("a-")).toBe(false);
    expect(isSandboxId("A")).toBe(false);
    expect(isSandboxId(42)).toBe(false);
  });
});
