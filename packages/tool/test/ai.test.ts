import type { LanguageModelV4CallOptions, LanguageModelV4GenerateResult } from "@ai-sdk/provider";
import { generateText, isStepCount } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskAiTool, remoteTaskToolSet } from "../src/ai.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

const usage: LanguageModelV4GenerateResult["usage"] = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that calls `remote_task` with `args` once, then answers with text. */
function modelCalling(args: Record<string, unknown>) {
  return new MockLanguageModelV4({
    doGenerate: async (options: LanguageModelV4CallOptions) => {
      const answered = options.prompt.some((m) => m.role === "tool");
      if (answered) {
        return {
          content: [{ type: "text", text: "done" }],
          finishReason: { unified: "stop", raw: "stop" },
          usage,
          warnings: [],
        };
      }
      return {
        content: [
          {
            type: "tool-call",
            toolCallId: "call-1",
            toolName: "remote_task",
            input: JSON.stringify(args),
          },
        ],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    },
  });
}

/** The tool result the model was sent in its second call. */
function toolOutputSeen(model: MockLanguageModelV4) {
  const second = model.doGenerateCalls[1];
  const message = second?.prompt.find((m) => m.role === "tool");
  const part = message?.role === "tool" ? message.content[0] : undefined;
  return part?.type === "tool-result" ? part.output : undefined;
}

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("AI SDK adapter (generateText with a mock model, real bridge)", () => {
  it("advertises remote_task with its description and JSON Schema", async () => {
    const model = modelCalling({ command: "true" });
    await generateText({
      model,
      prompt: "go",
      tools: { remote_task: createRemoteTaskAiTool({ client: bridge.client }) },
      stopWhen: isStepCount(2),
    });
    const advertised = model.doGenerateCalls[0]?.tools?.[0];
    expect(advertised).toMatchObject({ type: "function", name: "remote_task" });
    expect(advertised?.type === "function" && advertised.description).toMatch(/fresh, throwaway/);
    expect(advertised?.type === "function" && advertised.inputSchema).toMatchObject({
      properties: { command: { type: "string" }, timeout: { type: "number", default: 120 } },
      required: ["command"],
    });
  });

  it("runs the call for real and feeds the text back to the model", async () => {
    const model = modelCalling({ command: "echo hello from $((6 * 7))" });
    const result = await generateText({
      model,
      prompt: "go",
      tools: { remote_task: createRemoteTaskAiTool({ client: bridge.client }) },
      stopWhen: isStepCount(2),
    });
    expect(toolOutputSeen(model)).toEqual({ type: "text", value: "hello from 42\n" });
    const output = result.steps[0]?.staticToolResults[0]?.output;
    expect(output).toMatchObject({ status: "success", isError: false });
    expect(output?.result?.sandboxId).toMatch(/^mikan-task-/);
    expect(result.text).toBe("done");
  });

  it("shows the model a non-zero exit as error-text with the exact reference text", async () => {
    const model = modelCalling({ command: "echo oops >&2; exit 3" });
    const result = await generateText({
      model,
      prompt: "go",
      tools: { remote_task: createRemoteTaskAiTool({ client: bridge.client }) },
      stopWhen: isStepCount(2),
    });
    expect(toolOutputSeen(model)).toEqual({
      type: "error-text",
      value: "oops\n\n\nCommand exited with code 3",
    });
    const output = result.steps[0]?.staticToolResults[0]?.output;
    expect(output).toMatchObject({ status: "failed", isError: true });
    expect(output?.result?.exitCode).toBe(3);
  });

  it("records a failure to run as a tool-error part", async () => {
    const model = modelCalling({ command: "true" });
    const result = await generateText({
      model,
      prompt: "go",
      // No bridge configured: the tool cannot run the command.
      tools: { remote_task: createRemoteTaskAiTool({ env: {} }) },
      stopWhen: isStepCount(2),
    });
    const errors = result.steps[0]?.content.filter((part) => part.type === "tool-error") ?? [];
    expect(errors).toHaveLength(1);
    const seen = toolOutputSeen(model);
    expect(seen?.type).toBe("error-text");
    expect(seen?.type === "error-text" && seen.value).toMatch(/CLOUDFLARE_SANDBOX_URL is not set/);
  });

  it("aborting the generation stops the remote command", async () => {
    const controller = new AbortController();
    const model = modelCalling({ command: "sleep 30" });
    const started = bridge.nextStart();
    const generation = generateText({
      model,
      prompt: "go",
      tools: { remote_task: createRemoteTaskAiTool({ client: bridge.client }) },
      stopWhen: isStepCount(2),
      abortSignal: controller.signal,
    }).then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    const spec = await started;
    controller.abort();
    await bridge.destroyed(spec.sandboxId);
    expect(spec.signal.aborted).toBe(true);
    expect(bridge.live()).toBe(0);
    const outcome = await generation;
    if ("value" in outcome) {
      const errors = outcome.value.steps[0]?.content.filter((p) => p.type === "tool-error");
      expect(errors?.map((e) => (e.type === "tool-error" ? String(e.error) : ""))).toEqual([
        "RemoteTaskToolError: remote_task aborted",
      ]);
    }
  });

  it("remoteTaskToolSet offers the tool only with a configured bridge", () => {
    expect(remoteTaskToolSet({})).toEqual({});
    expect(Object.keys(remoteTaskToolSet(bridge.env))).toEqual(["remote_task"]);
  });
});

describe("AI SDK adapter: toModelOutput", () => {
  const tool = createRemoteTaskAiTool({ env: {} });
  const failed = { text: "exit code 1", isError: true, status: "failed" } as const;

  it("takes AI SDK 7's options object ({ toolCallId, input, output })", async () => {
    const shown = await tool.toModelOutput?.({
      toolCallId: "call-1",
      input: { command: "false", timeout: 120 },
      output: failed,
    });
    expect(shown).toEqual({ type: "error-text", value: "exit code 1" });
  });

  it("takes the output itself, as AI SDK 5 and Mastra call it", async () => {
    const call = tool.toModelOutput as unknown as (output: unknown) => unknown;
    expect(await call(failed)).toEqual({ type: "error-text", value: "exit code 1" });
    expect(await call({ text: "hi", isError: false, status: "success" })).toEqual({
      type: "text",
      value: "hi",
    });
  });
});
