import { concatBytes } from "@remote-task/internal";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { secretMatcher } from "../src/auth.js";
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

describe("ForwardGate with a reader that falls behind", () => {
  const encoder = new TextEncoder();

  it("counts skipped bytes, reports them once, and cuts no character in half", () => {
    const gate = new ForwardGate(100);
    expect(gate.take(encoder.encode("a€"))).toBe("a€");
    // "€" is e2 82 ac: its first byte is forwarded-in-waiting, then the rest is skipped.
    expect(gate.take(new Uint8Array([0xe2]))).toBe("");
    gate.skip(new Uint8Array([0x82]));
    expect(gate.takeSkipped()).toBe(2);
    expect(gate.takeSkipped()).toBe(0);
    // Resuming inside a character: its last byte is skipped too, the next one is whole.
    expect(gate.take(new Uint8Array([0xac, 0x62]))).toBe("b");
    expect(gate.takeSkipped()).toBe(1);
    expect(gate.flush()).toBe("");
  });

  it("accounts for every byte below the cap as forwarded or skipped, whatever the room", () => {
    fc.assert(
      fc.property(
        // Text without U+FFFD of its own: one in the output then means a character was cut.
        fc.string({ unit: "grapheme", maxLength: 300 }).filter((text) => !text.includes("\uFFFD")),
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 30 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 30 }),
        (text, sizes, rooms) => {
          const bytes = encoder.encode(text);
          const gate = new ForwardGate(bytes.byteLength + 1);
          let forwarded = "";
          let skipped = 0;
          for (let at = 0, i = 0; at < bytes.byteLength; i++) {
            const size = sizes[i % sizes.length] as number;
            const chunk = bytes.subarray(at, at + size);
            at += size;
            if (rooms[i % rooms.length]) forwarded += gate.take(chunk);
            else gate.skip(chunk);
            skipped += gate.takeSkipped();
          }
          forwarded += gate.flush();
          skipped += gate.takeSkipped();
          expect(forwarded).not.toContain("\uFFFD");
          expect(encoder.encode(forwarded).byteLength + skipped).toBe(bytes.byteLength);
          if (rooms.every(Boolean)) expect(forwarded).toBe(text);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("counts skipped bytes only up to the cap", () => {
    const gate = new ForwardGate(10);
    expect(gate.take(encoder.encode("abcd"))).toBe("abcd");
    gate.skip(encoder.encode("efghijkl"));
    expect(gate.takeSkipped()).toBe(6);
    expect(gate.take(encoder.encode("more"))).toBe("");
    expect(gate.takeSkipped()).toBe(0);
  });
});

describe("secretMatcher", () => {
  it("compares secrets of any length", async () => {
    const abc = secretMatcher("abc");
    expect(await abc("abc")).toBe(true);
    expect(await abc("abd")).toBe(false);
    expect(await abc("abcd")).toBe(false);
    expect(await secretMatcher("a")("")).toBe(false);
  });
});
