import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskSandbox, MASTRA_SANDBOX_INSTRUCTIONS } from "../src/mastra.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("Mastra WorkspaceSandbox (executeCommand as Mastra's execute_command calls it)", () => {
  it("runs a command and answers with Mastra's CommandResult", async () => {
    const sandbox = createRemoteTaskSandbox({ env: bridge.env });
    const result = await sandbox.executeCommand("echo out; echo err >&2; exit 3", [], {
      timeout: 30_000,
    });
    expect(result).toMatchObject({
      success: false,
      exitCode: 3,
      stdout: "out\n",
      stderr: "err\n",
      timedOut: false,
      stdoutTruncated: false,
      command: "echo out; echo err >&2; exit 3",
      args: [],
    });
    expect(result.executionTimeMs).toBeGreaterThanOrEqual(0);
    await sandbox.destroy();
    expect(sandbox.status).toBe("destroyed");
  });

  it("quotes args, passes cwd, env and the timeout in seconds, and streams output", async () => {
    const sandbox = createRemoteTaskSandbox({ client: bridge.client });
    const chunks: string[] = [];
    const next = bridge.nextStart();
    const result = await sandbox.executeCommand("printf '%s|' \"$GREETING\"", ["a b", "it's"], {
      timeout: 7_000,
      cwd: "/tmp",
      env: { GREETING: "hi", UNSET: undefined },
      onStdout: (data) => chunks.push(data),
    });
    const spec = await next;
    expect(result.stdout).toBe("hi|a b|it's|");
    expect(chunks.join("")).toBe("hi|a b|it's|");
    expect(spec.timeoutMs).toBe(7_000);
    expect(spec.cwd).toBe("/tmp");
    expect(spec.env).toEqual({ GREETING: "hi" });
  });

  it("reports a timeout as timedOut, not success", async () => {
    const sandbox = createRemoteTaskSandbox({ client: bridge.client });
    const result = await sandbox.executeCommand("sleep 5", [], { timeout: 1_000 });
    expect(result).toMatchObject({ success: false, timedOut: true });
  });

  it("runs each command in a fresh sandbox, says so to the model, and refuses snapshots", async () => {
    const sandbox = createRemoteTaskSandbox({ client: bridge.client });
    await sandbox.executeCommand("echo kept > file.txt");
    const second = await sandbox.executeCommand("cat file.txt 2>/dev/null || echo missing");
    expect(second.stdout).toBe("missing\n");
    expect(sandbox.getInstructions()).toBe(MASTRA_SANDBOX_INSTRUCTIONS);
    await expect(sandbox.snapshot()).rejects.toThrow(/cannot be snapshotted/);
  });
});
