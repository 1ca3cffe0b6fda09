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
      lines.push(args.join(" "));
    });
    const logged: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
      logged.push(String(chunk));
      return true;
    });
    await import("../examples/quick-start.js");
    // Its bridge is silenced: no log line on stdout or stderr, only the example's own output.
    expect(lines.filter((line) => line.startsWith("{"))).toEqual([]);
    expect(logged).toEqual([]);
    expect(lines[0]).toBe("exited 3");
    expect(lines[1]).toMatch(/^hello from \//);
    expect(lines).toContain("3/3 (0 failed)");
    expect(lines.slice(-3)).toEqual([expect.any(String), "42", "done"]);
  });
});
