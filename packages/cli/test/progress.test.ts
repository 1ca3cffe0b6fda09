import { expect, it } from "vitest";
import { renderProgress } from "../src/progress.js";

it("shows bar, counts, rate and ETA", () => {
  expect(renderProgress({ done: 5, failed: 1, total: 20 }, 2_500)).toBe(
    "[######------------------] 5/20 done, 1 failed, 2.0/s, ETA 8s",
  );
});

it("shows a full bar and no ETA when done", () => {
  expect(renderProgress({ done: 3, failed: 0, total: 3 }, 90_000)).toBe(
    "[########################] 3/3 done, 0 failed, 0.0/s, ETA 0s",
  );
});

it("says the ETA is unknown before the first task ends", () => {
  expect(renderProgress({ done: 0, failed: 0, total: 10 }, 1_000)).toContain("ETA ?");
});

it("shows minutes for long ETAs", () => {
  expect(renderProgress({ done: 1, failed: 0, total: 100 }, 2_000)).toContain("ETA 3m18s");
});
