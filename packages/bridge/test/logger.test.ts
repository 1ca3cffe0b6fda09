import { afterEach, expect, it, vi } from "vitest";
import { createBridge, MIN_TOKEN_LENGTH } from "../src/index.js";
import { startEmbeddedBridge } from "../src/node.js";
import { createFakeBackend } from "../src/testing/index.js";
import { memoryLogger } from "./helpers.js";

afterEach(() => {
  vi.restoreAllMocks();
});

it("the Node host logs to stderr by default, leaving stdout to the embedding program", async () => {
  const stdout: string[] = [];
  const stderr: string[] = [];
  vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
    stdout.push(String(chunk));
    return true;
  });
  vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
    stderr.push(String(chunk));
    return true;
  });
  vi.spyOn(console, "log").mockImplementation((...args) => stdout.push(args.join(" ")));
  const bridge = await startEmbeddedBridge({ token: "logger-test-token" });
  try {
    const response = await fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: "Bearer logger-test-token", "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: "logger-test-1", command: "echo hi" }),
    });
    expect((await response.json()).stdout).toBe("hi\n");
  } finally {
    await bridge.close();
  }
  expect(stdout).toEqual([]);
  const lines = stderr
    .join("")
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line));
  expect(lines).toContainEqual(
    expect.objectContaining({ event: "exec", sandboxId: "logger-test-1", outcome: "exited" }),
  );
});

it("warns through the logger about a token too short to be a secret, without writing the token", async () => {
  expect(MIN_TOKEN_LENGTH).toBe(16);
  const weak = memoryLogger();
  await createBridge({ backend: createFakeBackend(), token: "dev", logger: weak }).shutdown();
  expect(weak.entries).toEqual([
    { event: "warning", level: "warn", detail: expect.stringContaining("3 characters long") },
  ]);
  expect(JSON.stringify(weak.entries)).not.toMatch(/\bdev\b/);

  const strong = memoryLogger();
  const token = "x".repeat(MIN_TOKEN_LENGTH);
  await createBridge({ backend: createFakeBackend(), token, logger: strong }).shutdown();
  expect(strong.entries).toEqual([]);
});
