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
