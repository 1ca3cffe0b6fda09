import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";

const example = readFileSync(new URL("../examples/quick-start.ts", import.meta.url), "utf8");

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the README quick start", () => {
  it("is the example file, verbatim", () => {
    const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
    expect(readme).toContain(example.trim());
  });

  it("runs against the embedded bridge", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => {
      const line = args.join(" ");
      // The bridge's own JSON log lines are not the example's output.
      if (!line.startsWith("{")) lines.push(line);
    });
    await import("../examples/quick-start.js");
    expect(lines[0]).toBe("exited 3");
    expect(lines[1]).toMatch(/^hello from \//);
    expect(lines).toContain("3/3 (0 failed)");
    expect(lines.slice(-3)).toEqual([expect.any(String), "42", "done"]);
  });
});
