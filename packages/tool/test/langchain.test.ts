import { ToolMessage } from "@langchain/core/messages";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createRemoteTaskBackend,
  createRemoteTaskLangChainTool,
  NO_FILES_TEXT,
  remoteTaskLangChainTools,
} from "../src/langchain.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("LangChain tool (@langchain/core)", () => {
  it("answers a model's tool call with a ToolMessage holding the result text", async () => {
    const tool = createRemoteTaskLangChainTool({ client: bridge.client });
    expect(tool.name).toBe("remote_task");
    const message = await tool.invoke({
      type: "tool_call",
      id: "call-1",
      name: "remote_task",
      args: { command: "echo from langchain" },
    });
    expect(message).toBeInstanceOf(ToolMessage);
    expect(message.tool_call_id).toBe("call-1");
    expect(message.content).toBe("from langchain\n");
  });

  it("gives the model the failure text, and refuses arguments its schema rejects", async () => {
    const tool = createRemoteTaskLangChainTool({ client: bridge.client });
    expect(await tool.invoke({ command: "exit 5" })).toContain("5");
    await expect(tool.invoke({ command: "" } as never)).rejects.toThrow();
  });

  it("stops the remote command when the run's signal aborts", async () => {
    const tool = createRemoteTaskLangChainTool({ client: bridge.client });
    const controller = new AbortController();
    const started = bridge.nextStart();
    const call = tool.invoke({ command: "sleep 30" }, { signal: controller.signal });
    const spec = await started;
    controller.abort();
    await expect(call).rejects.toThrow();
    await bridge.destroyed(spec.sandboxId);
  });

  it("is offered only where a bridge is configured", () => {
    expect(remoteTaskLangChainTools({})).toEqual([]);
    expect(remoteTaskLangChainTools(bridge.env).map((t) => t.name)).toEqual(["remote_task"]);
  });
});

describe("deepagents sandbox backend", () => {
  it("runs execute(command) remotely and answers with an ExecuteResponse", async () => {
    const backend = createRemoteTaskBackend({ env: bridge.env });
    expect(backend.id).toBe("remote-task");
    expect(await backend.execute("echo out; echo err >&2; exit 2")).toEqual({
      output: "out\nerr\n",
      exitCode: 2,
      truncated: false,
    });
    await backend.close();
  });

  it("passes its timeout and reports a bridge failure with no exit code", async () => {
    const backend = createRemoteTaskBackend({ client: bridge.client, timeoutSeconds: 1 });
    expect((await backend.execute("sleep 5")).exitCode).toBe(124);
    const unreachable = createRemoteTaskBackend({
      env: {
        CLOUDFLARE_SANDBOX_URL: "http://127.0.0.1:9",
        CLOUDFLARE_SANDBOX_TOKEN: "x".repeat(20),
      },
    });
    const failed = await unreachable.execute("true");
    expect(failed.exitCode).toBeNull();
    expect(failed.output).toMatch(/^remote_task failed: /);
    await unreachable.close();
  });

  it("keeps no files: every file operation says so", async () => {
    const backend = createRemoteTaskBackend({ client: bridge.client });
    for (const answer of [
      await backend.ls("/"),
      await backend.read("/a"),
      await backend.readRaw("/a"),
      await backend.write("/a", "x"),
      await backend.edit("/a", "x", "y"),
      await backend.grep("x"),
      await backend.glob("*"),
    ]) {
      expect(answer).toEqual({ error: NO_FILES_TEXT });
    }
  });
});
