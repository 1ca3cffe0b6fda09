import { isSandboxId } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import { HedgePolicy, hedgeName } from "../src/hedge.js";

describe("the hedge policy", () => {
  it("hedges after the configured delay, or never when off", () => {
    expect(new HedgePolicy({ after: 2500 }).delayMs()).toBe(2500);
    expect(new HedgePolicy({ after: "off" }).delayMs()).toBeUndefined();
  });

  it("takes the observed delay from recent starts: a tenth more than three in four took", () => {
    const policy = new HedgePolicy({ after: "observed" });
    // Until a few starts were seen: a conservative default.
    expect(policy.delayMs()).toBe(10_000);
    for (const ms of [2000, 2100, 2200, 2300, 2400, 2500, 2600, 20_000]) policy.record(ms);
    // p75 of the eight is 2500: the 20 s tail does not raise the delay.
    expect(policy.delayMs()).toBe(2750);
    // Bounded: never below 1 s, never above 30 s.
    const quick = new HedgePolicy({ after: "observed" });
    for (let i = 0; i < 8; i++) quick.record(100);
    expect(quick.delayMs()).toBe(1000);
    const slow = new HedgePolicy({ after: "observed" });
    for (let i = 0; i < 8; i++) slow.record(60_000);
    expect(slow.delayMs()).toBe(30_000);
  });

  it("forgets all but the last 50 starts", () => {
    const policy = new HedgePolicy({ after: "observed" });
    for (let i = 0; i < 50; i++) policy.record(20_000);
    for (let i = 0; i < 50; i++) policy.record(2_000);
    expect(policy.delayMs()).toBe(2200);
  });

  it("keeps hedges in flight to a quarter of the cold starts in flight, at least one", () => {
    const policy = new HedgePolicy({ after: "observed" });
    const starts = Array.from({ length: 8 }, () => policy.starting());
    const first = policy.tryHedge();
    const second = policy.tryHedge();
    expect(first).toBeDefined();
    expect(second).toBeDefined();
    expect(policy.tryHedge()).toBeUndefined();
    first?.();
    first?.();
    expect(policy.tryHedge()).toBeDefined();
    for (const over of starts) over();
    expect(policy.tryHedge()).toBeUndefined();
  });
});

describe("a hedge's sandbox name", () => {
  it("is fixed per sandbox id, fits in 63 characters, and is never a sandbox id", async () => {
    const long = "a".repeat(63);
    const name = await hedgeName(long);
    expect(await hedgeName(long)).toBe(name);
    expect(await hedgeName("b")).not.toBe(name);
    expect(name.length).toBeLessThanOrEqual(63);
    expect(isSandboxId(name)).toBe(false);
  });
});
