import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";

const example = readFileSync(new URL("../examples/quick-start.ts", import.meta.url), "utf8");
const stdinExample = readFileSync(
  new URL("../examples/stdin-and-network.ts", import.meta.url),
  "utf8",
);
const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the README quick start", () => {
  it("is the example file, verbatim", () => {
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

describe("the README stdin and network example", () => {
  it("is the example file, verbatim", () => {
    expect(readme).toContain(stdinExample.trim());
  });

  // Runs once the embedded bridge takes stdin (it reports `limits.maxStdinBytes`).
  it("runs against the embedded bridge", async (context) => {
    const { startEmbeddedBridge } = await import("@remote-task/bridge/node");
    const { silentLogger } = await import("@remote-task/bridge");
    const probe = await startEmbeddedBridge({ logger: silentLogger });
    const health = await (
      await fetch(`${probe.url}/health`, { headers: { authorization: `Bearer ${probe.token}` } })
    ).json();
    await probe.close();
    if (health.limits?.maxStdinBytes === undefined) context.skip("the bridge takes no stdin yet");
    const lines: string[] = [];
    vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => {
      lines.push(args.join(" "));
    });
    await import("../examples/stdin-and-network.js");
    expect(lines.slice(0, 2)).toEqual(["3", "00 01 ff"]);
    expect(lines[2]).toBe(JSON.stringify(health.network));
    if (health.network !== undefined) expect(lines[3]).toBe("no network here");
  });
});
