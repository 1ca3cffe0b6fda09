import { Agent, type AgentMessage } from "@mariozechner/pi-agent-core";
import {
  fauxAssistantMessage,
  fauxToolCall,
  registerFauxProvider,
  type ToolResultMessage,
} from "@mariozechner/pi-ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskPiTool, remoteTaskPiTools } from "../src/pi.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
const faux = registerFauxProvider({ tokensPerSecond: 1_000_000 });
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  faux.unregister();
  await bridge?.close();
});

/** Runs one agent turn in which the faux model calls remote_task with `args`. */
async function runAgent(args: Record<string, unknown>, onStart?: (agent: Agent) => void) {
  const agent = new Agent({
    initialState: {
      systemPrompt: "",
      model: faux.getModel(),
      tools: [createRemoteTaskPiTool({ client: bridge.client })],
    },
  });
  faux.setResponses([
    fauxAssistantMessage(fauxToolCall("remote_task", args, { id: "call-1" }), {
      stopReason: "toolUse",
    }),
    fauxAssistantMessage("done"),
  ]);
  onStart?.(agent);
  await agent.prompt("go");
  const results = agent.state.messages.filter(
    (m: AgentMessage): m is ToolResultMessage => m.role === "toolResult",
  );
  expect(results).toHaveLength(1);
  return results[0]!;
}

function textOf(message: ToolResultMessage): string {
  return message.content.map((c) => (c.type === "text" ? c.text : "")).join("");
}

describe("pi-agent-core adapter (Agent with the faux provider, real bridge)", () => {
  it("runs the call through the agent loop and returns the output as text", async () => {
    const message = await runAgent({ command: "echo hi from pi" });
    expect(message.isError).toBe(false);
    expect(textOf(message)).toBe("hi from pi\n");
    expect(message.details).toMatchObject({ status: "success", result: { exitCode: 0 } });
  });

  it("throws on a non-zero exit with the reference text, as the reference tool does", async () => {
    const message = await runAgent({ command: "exit 4" });
    expect(message.isError).toBe(true);
    expect(textOf(message)).toBe("(no output)\n\nCommand exited with code 4");
  });

  it("reports a timeout after the output that arrived", async () => {
    const message = await runAgent({ command: "echo waiting; sleep 10", timeout: 2 });
    expect(message.isError).toBe(true);
    expect(textOf(message)).toBe("waiting\n\n\nCommand timed out after 2 seconds");
  });

  it("the framework validates arguments against the JSON Schema parameters", async () => {
    const message = await runAgent({ command: "" });
    expect(message.isError).toBe(true);
    expect(textOf(message)).toMatch(/Validation failed for tool "remote_task"/);
    expect(bridge.started.some((spec) => spec.command === "")).toBe(false);
  });

  it("aborting the agent stops the remote command", async () => {
    const started = bridge.nextStart();
    const message = await runAgent({ command: "sleep 30" }, (agent) => {
      void started.then(() => agent.abort());
    });
    const spec = await started;
    await bridge.destroyed(spec.sandboxId);
    expect(spec.signal.aborted).toBe(true);
    expect(message.isError).toBe(true);
    expect(textOf(message)).toBe("remote_task aborted");
    expect(bridge.live()).toBe(0);
  });

  it("remoteTaskPiTools offers the tool only with a configured bridge", () => {
    expect(remoteTaskPiTools({})).toEqual([]);
    expect(remoteTaskPiTools(bridge.env).map((t) => t.name)).toEqual(["remote_task"]);
  });
});
