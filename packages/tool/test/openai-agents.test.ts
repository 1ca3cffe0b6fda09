import {
  Agent,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  RunContext,
  Runner,
  Usage,
} from "@openai/agents";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createRemoteTaskOpenAIAgentsTool,
  remoteTaskOpenAIAgentsTools,
} from "../src/openai-agents.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

/**
 * A model that calls `remote_task` once with `args` (as a strict-mode model sends them), then
 * answers with the tool's output, so the test reads what the SDK gave the model.
 */
function scriptedModel(args: object): Model & { seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    async getResponse(request: ModelRequest): Promise<ModelResponse> {
      const input = request.input as AgentInputItem[];
      const output = input.find((item) => item.type === "function_call_result");
      if (output === undefined) {
        return {
          usage: new Usage(),
          output: [
            {
              type: "function_call",
              callId: "call_1",
              name: "remote_task",
              arguments: JSON.stringify(args),
              status: "completed",
            },
          ],
        };
      }
      const text = (output as { output: { type: string; text: string } }).output.text;
      seen.push(text);
      return {
        usage: new Usage(),
        output: [
          {
            type: "message",
            role: "assistant",
            status: "completed",
            content: [{ type: "output_text", text }],
          },
        ],
      };
    },
    getStreamedResponse() {
      throw new Error("not used");
    },
  };
}

async function runAgent(args: object): Promise<string> {
  const model = scriptedModel(args);
  const agent = new Agent({
    name: "tester",
    model,
    tools: [createRemoteTaskOpenAIAgentsTool({ client: bridge.client })],
  });
  const result = await new Runner({ tracingDisabled: true }).run(agent, "run it");
  expect(model.seen).toHaveLength(1);
  expect(result.finalOutput).toBe(model.seen[0]);
  return model.seen[0] as string;
}

describe("OpenAI Agents SDK adapter", () => {
  it("is a strict function tool named remote_task with a nullable timeout", () => {
    const agentsTool = createRemoteTaskOpenAIAgentsTool({ env: {} });
    expect(agentsTool.type).toBe("function");
    expect(agentsTool.name).toBe("remote_task");
    expect(agentsTool.strict).toBe(true);
    expect(agentsTool.parameters).toMatchObject({
      required: ["command", "timeout"],
      additionalProperties: false,
      properties: { timeout: { type: ["number", "null"] } },
    });
  });

  it("runs a call with timeout: null (the model's 'default') through a real Runner", async () => {
    expect(await runAgent({ command: "echo via-agents", timeout: null })).toBe("via-agents\n");
  });

  it("shows the model a failing command's text, with a timeout it named", async () => {
    expect(await runAgent({ command: "echo out; exit 3", timeout: 30 })).toBe(
      "out\n\n\nCommand exited with code 3",
    );
  });

  it("shows the model why its arguments are invalid", async () => {
    const text = await runAgent({ command: "true", timeout: -1 });
    expect(text).toMatch(/^Invalid remote_task arguments: timeout must be greater than 0\./);
  });

  it("passes the run's abort signal: the remote command stops", async () => {
    const agentsTool = createRemoteTaskOpenAIAgentsTool({ client: bridge.client });
    const controller = new AbortController();
    const started = bridge.nextStart();
    const call = agentsTool.invoke(
      new RunContext(),
      JSON.stringify({ command: "sleep 30", timeout: null }),
      { signal: controller.signal },
    );
    await started;
    controller.abort();
    expect(await call).toBe("remote_task aborted");
  });

  it("is offered only when the environment configures a bridge", () => {
    expect(remoteTaskOpenAIAgentsTools({})).toEqual([]);
    expect(remoteTaskOpenAIAgentsTools(bridge.env).map((t) => t.name)).toEqual(["remote_task"]);
  });
});
