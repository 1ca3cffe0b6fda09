import { concatBytes } from "@remote-task/internal";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { timingSafeEqual } from "../src/auth.js";
import { ForwardGate, TailBuffer } from "../src/output.js";

describe("TailBuffer", () => {
  it("always holds exactly the last min(cap, total) bytes and the exact total", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 64 }),
        fc.array(fc.uint8Array({ maxLength: 100 }), { maxLength: 40 }),
        (cap, chunks) => {
          const tail = new TailBuffer(cap);
          for (const chunk of chunks) tail.push(chunk);
          const all = concatBytes(chunks);
          expect(tail.total).toBe(all.byteLength);
          expect([...tail.bytes()]).toEqual([...all.subarray(Math.max(0, all.byteLength - cap))]);
          expect(tail.truncated).toBe(all.byteLength > cap);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("drops a character cut at the start of a truncated tail, keeps whole ones", () => {
    const tail = new TailBuffer(5);
    tail.push(new TextEncoder().encode("x€€"));
    expect(tail.text()).toBe("€");
    const whole = new TailBuffer(10);
    whole.push(new TextEncoder().encode("€a"));
    expect(whole.text()).toBe("€a");
  });
});

describe("ForwardGate", () => {
  it("forwards whole characters across chunk splits and nothing past the cap", () => {
    const bytes = new TextEncoder().encode("a€b€c");
    const gate = new ForwardGate(6);
    const out = [...bytes].map((b) => gate.take(new Uint8Array([b]))).join("");
    expect(out).toBe("a€b");
    expect(gate.take(new TextEncoder().encode("more"))).toBe("");
    expect(gate.flush()).toBe("");
  });

  it("flushes an incomplete last character as U+FFFD when the stream ends below the cap", () => {
    const gate = new ForwardGate(100);
    expect(gate.take(new Uint8Array([0x61, 0xe2, 0x82]))).toBe("a");
    expect(gate.flush()).toBe("\uFFFD");
  });
});

describe("timingSafeEqual", () => {
  it("compares secrets of any length", async () => {
    expect(await timingSafeEqual("abc", "abc")).toBe(true);
    expect(await timingSafeEqual("abc", "abd")).toBe(false);
    expect(await timingSafeEqual("abc", "abcd")).toBe(false);
    expect(await timingSafeEqual("", "a")).toBe(false);
  });
});
