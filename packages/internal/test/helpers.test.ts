import { describe, expect, it } from "vitest";
import { raceAbort } from "../src/abort.js";
import { fromBase64, toBase64 } from "../src/base64.js";
import { brandClass, hasBrand } from "../src/brand.js";
import { concatBytes } from "../src/bytes.js";
import { requireIntegerAtLeast } from "../src/checks.js";
import { issuesOf, summarizeIssues } from "../src/issues.js";
import { retryAfterHeader } from "../src/retry-after.js";
import { MAX_TIMER_MS, timerDelay } from "../src/timers.js";

describe("raceAbort", () => {
  it("settles like the promise when no signal aborts", async () => {
    const signal = new AbortController().signal;
    await expect(raceAbort(Promise.resolve(1), signal)).resolves.toBe(1);
    await expect(raceAbort(Promise.reject(new Error("no")), signal)).rejects.toThrow("no");
  });

  it("rejects with the reason of the first signal to abort, even if the promise never settles", async () => {
    const a = new AbortController();
    const b = new AbortController();
    const raced = raceAbort(new Promise<never>(() => {}), a.signal, { other: b.signal });
    b.abort("b went first");
    a.abort("a");
    await expect(raced).rejects.toBe("b went first");
    const first = new AbortController();
    const alone = raceAbort(new Promise<never>(() => {}), first.signal);
    first.abort("only one");
    await expect(alone).rejects.toBe("only one");
  });

  it("rejects at once for an aborted signal, with the mapped error when given", async () => {
    const controller = new AbortController();
    controller.abort();
    const late = Promise.reject(new Error("ignored"));
    await expect(
      raceAbort(late, controller.signal, { abortError: () => new Error("stopped") }),
    ).rejects.toThrow("stopped");
  });

  it("removes its listeners once settled", async () => {
    const controller = new AbortController();
    let listeners = 0;
    const signal = controller.signal;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners++;
      add(...args);
    }) as typeof add;
    signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners--;
      remove(...args);
    }) as typeof remove;
    for (let i = 0; i < 10; i++) await raceAbort(Promise.resolve(i), signal);
    expect(listeners).toBe(0);
  });
});

describe("hasBrand", () => {
  it("finds the brand on any object carrying it, from any copy", () => {
    const brand = Symbol.for("remote-task.Test");
    expect(hasBrand({ [Symbol.for("remote-task.Test")]: true }, brand)).toBe(true);
    expect(hasBrand({}, brand)).toBe(false);
    expect(hasBrand(null, brand)).toBe(false);
    expect(hasBrand("text", brand)).toBe(false);
  });
});

describe("brandClass", () => {
  /** A class as each copy of a package defines it: same brand name, distinct class objects. */
  function copyOfPackage() {
    class Base extends Error {
      static readonly isInstance = brandClass(this, "remote-task.test.Base");
    }
    class Special extends Base {
      static override readonly isInstance = brandClass(this, "remote-task.test.Special");
    }
    class Plain extends Base {}
    return { Base, Special, Plain };
  }

  it("recognises instances from another copy of the class, subclasses included", () => {
    const one = copyOfPackage();
    const other = copyOfPackage();
    expect(new other.Base("x") instanceof one.Base).toBe(false);
    expect(one.Base.isInstance(new other.Base("x"))).toBe(true);
    expect(one.Base.isInstance(new other.Special("x"))).toBe(true);
    expect(one.Special.isInstance(new other.Special("x"))).toBe(true);
    // A subclass without a brand of its own answers for its parent's.
    expect(one.Plain.isInstance(new other.Base("x"))).toBe(true);
  });

  it("tells classes apart and refuses other values", () => {
    const { Base, Special } = copyOfPackage();
    expect(Special.isInstance(new Base("x"))).toBe(false);
    expect(Base.isInstance(new Error("x"))).toBe(false);
    expect(Base.isInstance(null)).toBe(false);
    expect(Base.isInstance("remote-task.test.Base")).toBe(false);
    // The brand is inherited, not an own property: it never shows in keys or JSON.
    expect(Object.getOwnPropertySymbols(new Base("x"))).toEqual([]);
  });
});

describe("issuesOf and summarizeIssues", () => {
  it("makes paths JSON-safe and summarises the first issues", () => {
    const issues = issuesOf(
      {
        issues: [
          { path: ["env", "A", 0], message: "bad" },
          { path: [Symbol("key")], message: "odd" },
          { path: [], message: "root" },
        ],
      },
      (message) => message.toUpperCase(),
    );
    expect(issues).toEqual([
      { path: ["env", "A", 0], message: "BAD" },
      { path: ["Symbol(key)"], message: "ODD" },
      { path: [], message: "ROOT" },
    ]);
    expect(summarizeIssues(issues, 2)).toBe("env.A.0: BAD; Symbol(key): ODD");
    expect(summarizeIssues(issues)).toBe("env.A.0: BAD; Symbol(key): ODD; (root): ROOT");
  });
});

describe("retryAfterHeader", () => {
  it("is whole seconds rounded up, never negative", () => {
    expect(retryAfterHeader(1.2)).toBe("2");
    expect(retryAfterHeader(5)).toBe("5");
    expect(retryAfterHeader(-3)).toBe("0");
  });
});

describe("timerDelay", () => {
  it("clamps delays a timer cannot hold", () => {
    expect(MAX_TIMER_MS).toBe(2_147_483_647);
    expect(timerDelay(10)).toBe(10);
    expect(timerDelay(30 * 24 * 3600 * 1000)).toBe(MAX_TIMER_MS);
  });
});

describe("concatBytes", () => {
  it("joins parts in order, and returns a lone part as is", () => {
    const one = new Uint8Array([1, 2]);
    expect(concatBytes([one])).toBe(one);
    expect([...concatBytes([one, new Uint8Array([]), new Uint8Array([3])])]).toEqual([1, 2, 3]);
    expect(concatBytes([]).byteLength).toBe(0);
  });
});

describe("toBase64 and fromBase64", () => {
  it("round-trip every byte value and inputs longer than one chunk", () => {
    const every = Uint8Array.from({ length: 256 }, (_, i) => i);
    expect(toBase64(every)).toBe(Buffer.from(every).toString("base64"));
    expect(fromBase64(toBase64(every))).toEqual(every);
    const long = new Uint8Array(100_000).map((_, i) => (i * 7) % 256);
    expect(toBase64(long)).toBe(Buffer.from(long).toString("base64"));
    expect(fromBase64(Buffer.from(long).toString("base64"))).toEqual(long);
    expect(toBase64(new Uint8Array())).toBe("");
  });
});

describe("requireIntegerAtLeast", () => {
  it("returns an integer at or above the least and refuses anything else in one wording", () => {
    expect(requireIntegerAtLeast("n", 3, 3)).toBe(3);
    for (const bad of [2, 3.5, Number.NaN, "4", undefined]) {
      expect(() => requireIntegerAtLeast("limits.n", bad, 3)).toThrow(
        new TypeError(`limits.n must be an integer of at least 3; got ${String(bad)}.`),
      );
    }
    class OwnError extends Error {}
    expect(() => requireIntegerAtLeast("n", 0, 1, (m) => new OwnError(m))).toThrow(OwnError);
  });
});
