import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createRemoteTaskClaudeTool, remoteTaskClaudeTools } from "../src/claude.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("Claude Agent SDK tool definition (what its tool() returns)", () => {
  it("is named remote_task with the zod shape of its arguments", () => {
    const tool = createRemoteTaskClaudeTool({ client: bridge.client });
    expect(tool.name).toBe("remote_task");
    expect(tool.description).toContain("fresh");
    expect(Object.keys(tool.inputSchema)).toEqual(["command", "timeout"]);
    const parsed = z.object(tool.inputSchema).parse({ command: "echo hi" });
    expect(parsed).toEqual({ command: "echo hi", timeout: 120 });
  });

  it("answers the handler's call with a CallToolResult, isError for a failed command", async () => {
    const tool = createRemoteTaskClaudeTool({ client: bridge.client });
    const ok = await tool.handler({ command: "echo hi" }, {});
    expect(ok).toEqual({ content: [{ type: "text", text: "hi\n" }], isError: false });
    const failed = await tool.handler({ command: "exit 4" }, {});
    expect(failed.isError).toBe(true);
    expect(failed.content[0]?.text).toContain("4");
  });

  it("stops the remote command when the MCP request's signal aborts", async () => {
    const tool = createRemoteTaskClaudeTool({ client: bridge.client });
    const controller = new AbortController();
    const started = bridge.nextStart();
    const call = tool.handler({ command: "sleep 30" }, { signal: controller.signal });
    const spec = await started;
    controller.abort();
    const result = await call;
    expect(result).toEqual({
      content: [{ type: "text", text: "remote_task aborted" }],
      isError: true,
    });
    await bridge.destroyed(spec.sandboxId);
  });

  it("offers the tool only where a bridge is configured", () => {
    expect(remoteTaskClaudeTools({})).toEqual([]);
    expect(remoteTaskClaudeTools(bridge.env).map((t) => t.name)).toEqual(["remote_task"]);
  });
});
