import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskTool } from "../src/index.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("core tool configured from env (real bridge)", () => {
  it("creates its client from the variables and runs the call", async () => {
    const tool = createRemoteTaskTool({ env: bridge.env });
    try {
      const result = await tool.execute({ command: "echo $((1 + 1)); pwd" });
      expect(result).toMatchObject({ text: "2\n/workspace\n", isError: false, status: "success" });
    } finally {
      await tool.close();
    }
  });

  it("counts what the command wrote in the notice when the bridge kept only the tail", async () => {
    const tool = createRemoteTaskTool({ env: bridge.env });
    try {
      // 1.5 MB of output; the bridge keeps 1 MiB of it.
      const result = await tool.execute({ command: "yes line | head -n 300000" });
      expect(result.result).toMatchObject({ stdoutBytes: 1_500_000, stdoutTruncated: true });
      expect(result.text).toBe(
        `${"line\n".repeat(1999)}\n\n[Showing the last 9.8KB of 1.4MB (2000-line limit). Have the command summarise or filter its own output.]`,
      );
    } finally {
      await tool.close();
    }
  });

  it("says which bridge limit a call is over, and its value", async () => {
    const tool = createRemoteTaskTool({ env: bridge.env });
    try {
      const long = await tool.execute({ command: "x".repeat(70_000) });
      expect(long).toMatchObject({ isError: true, status: "error" });
      expect(long.text).toMatch(/command is longer than 65536 bytes/);
      const slow = await tool.execute({ command: "echo x", timeout: 100_000 });
      expect(slow.text).toMatch(/timeout must be at most 3600\b/);
      expect(slow.text).not.toMatch(/see issues|timeoutSeconds/);
    } finally {
      await tool.close();
    }
  });

  it("sends neither the host's variables nor a model-chosen env to the sandbox", async () => {
    const tool = createRemoteTaskTool({ env: { ...bridge.env, GH_TOKEN: "host-secret" } });
    try {
      const result = await tool.execute({
        command: "env",
        env: { GH_TOKEN: "model-secret" },
      });
      expect(result.isError).toBe(false);
      expect(result.text).not.toMatch(/secret|CLOUDFLARE_SANDBOX|GH_TOKEN/);
      expect(bridge.started.at(-1)?.env).toEqual({});
    } finally {
      await tool.close();
    }
  });
});
