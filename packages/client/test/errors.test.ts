import { describe, expect, it } from "vitest";
import * as errorModule from "../src/errors.js";

const errors = { ...errorModule };

const kinds = [
  "ConfigurationError",
  "AuthenticationError",
  "InvalidRequestError",
  "ForbiddenError",
  "CapacityError",
  "BridgeError",
  "ProtocolError",
  "ConnectionError",
  "TimeoutError",
  "AbortError",
] as const;

describe("error classes", () => {
  it("are recognised across duplicate copies of the package by brand, not instanceof", async () => {
    // A second module instance stands for a second install of the package.
    const copy = (await import(
      /* @vite-ignore */ `../src/errors.js?copy=${Date.now()}`
    )) as typeof errorModule;
    expect(copy.TimeoutError).not.toBe(errors.TimeoutError);
    for (const kind of kinds) {
      const foreign = new copy[kind]("x");
      expect(foreign instanceof errors[kind]).toBe(false);
      expect(errors[kind].isInstance(foreign)).toBe(true);
      expect(errors.RemoteTaskError.isInstance(foreign)).toBe(true);
      for (const other of kinds) {
        if (other !== kind) expect(errors[other].isInstance(foreign)).toBe(false);
      }
      expect(foreign.name).toBe(kind);
    }
    // A subclass's check holds for that subclass and its own subclasses only.
    const base = new copy.RemoteTaskError("x");
    for (const kind of kinds) expect(errors[kind].isInstance(base)).toBe(false);
    class SlowTimeout extends copy.TimeoutError {}
    expect(errors.TimeoutError.isInstance(new SlowTimeout("x"))).toBe(true);
    expect(errors.AbortError.isInstance(new SlowTimeout("x"))).toBe(false);
    expect(errors.RemoteTaskError.isInstance(new Error("plain"))).toBe(false);
    expect(errors.RemoteTaskError.isInstance({ name: "TimeoutError" })).toBe(false);
  });

  it("carry status, code, sandbox id, issues, paths and retryAfterSeconds", () => {
    const invalid = new errors.InvalidRequestError("bad", {
      status: 400,
      code: "invalid_request",
      sandboxId: "a-1",
      issues: [{ path: ["command"], message: "empty" }],
    });
    expect([invalid.status, invalid.code, invalid.sandboxId]).toEqual([
      400,
      "invalid_request",
      "a-1",
    ]);
    expect(invalid.issues).toHaveLength(1);
    expect(new errors.CapacityError("full", { retryAfterSeconds: 3 }).retryAfterSeconds).toBe(3);
    expect(new errors.ProtocolError("shape", { paths: [["code"]] }).paths).toEqual([["code"]]);
    const cause = new Error("root");
    expect(new errors.ConnectionError("down", { cause }).cause).toBe(cause);
  });

  it("say whether the request may be sent again and whether the command may have run", () => {
    const plain = new errors.BridgeError("x");
    expect([plain.retryable, plain.mayHaveRun]).toEqual([false, false]);
    const refused = new errors.ConnectionError("x", { retryable: true });
    expect([refused.retryable, refused.mayHaveRun]).toEqual([true, false]);
    const broken = new errors.ConnectionError("x", { mayHaveRun: true });
    expect([broken.retryable, broken.mayHaveRun]).toEqual([false, true]);
  });
});
