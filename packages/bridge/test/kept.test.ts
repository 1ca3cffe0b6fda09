import { afterEach, describe, expect, it, vi } from "vitest";
import { KeptCalls } from "../src/kept.js";
import { KEPT_CALL_OVERHEAD_BYTES, resolveDurable } from "../src/limits.js";
import { HttpError } from "../src/responses.js";

afterEach(() => {
  vi.useRealTimers();
});

const result = (stdout: string) => ({
  kind: "result" as const,
  result: { stdout, stderr: "", code: 0 },
});

describe("KeptCalls", () => {
  it("drops an outcome when its time is up, on the sweep timer, and calls its id expired", () => {
    vi.useFakeTimers();
    const table = new KeptCalls(resolveDurable({ keptSeconds: 600 }));
    table.keep("a", "echo a", result("a\n"), false);
    expect(table.lookup("a")).toMatchObject({ kind: "kept", call: { command: "echo a" } });
    vi.advanceTimersByTime(599_000);
    expect(table.count).toBe(1);
    vi.advanceTimersByTime(1_000);
    // The timer swept it, without a lookup.
    expect(table.count).toBe(0);
    expect(table.bytes).toBe(0);
    expect(table.lookup("a")).toEqual({ kind: "expired" });
    expect(table.lookup("never")).toBeUndefined();
    table.close();
  });

  it("holds room for detached calls within the byte bound and refuses beyond it (429)", () => {
    const cap = 100_000;
    const perCall = KEPT_CALL_OVERHEAD_BYTES + "sleep 9".length + 2 * cap;
    const table = new KeptCalls(resolveDurable({ maxKeptBytes: perCall * 2 + 2_000 }));
    table.reserve("a", "sleep 9", cap);
    table.reserve("b", "sleep 9", cap);
    let refusal: unknown;
    try {
      table.reserve("c", "sleep 9", cap);
    } catch (error) {
      refusal = error;
    }
    expect(HttpError.isInstance(refusal)).toBe(true);
    expect((refusal as HttpError).details).toMatchObject({ status: 429 });
    expect((refusal as HttpError).details.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(table.bytes).toBe(perCall * 2);
    // Its outcome replaces the room it held: far smaller, so another fits.
    table.keep("a", "sleep 9", result("done\n"), false);
    expect(table.bytes).toBeLessThan(perCall * 2);
    table.reserve("c", "sleep 9", cap);
    table.close();
  });

  it("makes room by dropping outcomes already received, oldest first, never the others", () => {
    const table = new KeptCalls(resolveDurable({ maxKept: 2 }));
    table.keep("received", "x", result(""), true);
    table.keep("waiting", "x", result(""), false);
    table.reserve("new", "x", 100_000);
    expect(table.lookup("received")).toEqual({ kind: "expired" });
    expect(table.lookup("waiting")).toMatchObject({ kind: "kept" });
    expect(() => table.reserve("more", "x", 100_000)).toThrow(HttpError);
    // An outcome that held no room and finds none is not kept: its id is expired at once.
    table.keep("plain", "x", result(""), true);
    expect(table.lookup("plain")).toEqual({ kind: "expired" });
    table.close();
  });

  it("says since when it forgot no id: the latest drop time of an expired id it let go", () => {
    let now = 1_000;
    const table = new KeptCalls(resolveDurable({ keptSeconds: 0, maxKept: 1 }), () => now);
    // keptSeconds 0: each outcome's id is expired at once; 1024 expired ids are remembered.
    for (let index = 0; index < 1_024; index++) {
      now += 1;
      table.keep(`id-${index}`, "x", result(""), true);
    }
    expect(table.forgottenUpTo).toBeUndefined();
    expect(table.lookup("id-0")).toEqual({ kind: "expired" });
    now += 1;
    table.keep("one-more", "x", result(""), true);
    // id-0 (dropped as expired at 1001) is forgotten: unknown now, and the table says so.
    expect(table.lookup("id-0")).toBeUndefined();
    expect(table.forgottenUpTo).toBe(1_001);
    expect(table.lookup("id-1")).toEqual({ kind: "expired" });
    now += 1;
    table.keep("two-more", "x", result(""), true);
    expect(table.forgottenUpTo).toBe(1_002);
    table.close();
  });
});
