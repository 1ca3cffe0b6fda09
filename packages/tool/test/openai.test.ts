import { readFileSync } from "node:fs";
import type {
  ChatCompletion,
  ChatCompletionMessageToolCall,
  ChatCompletionToolMessageParam,
} from "openai/resources/chat/completions";
import type {
  Response,
  ResponseFunctionToolCall,
  ResponseInputItem,
} from "openai/resources/responses/responses";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTaskOpenAITool } from "../src/openai.js";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";

function fixture<T>(name: string): T {
  return JSON.parse(readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8")) as T;
}

/** Tool calls as the two APIs return them (recorded shapes). */
const completion = fixture<ChatCompletion>("openai-chat-completion.json");
const response = fixture<Response>("openai-response.json");
const chatCalls = completion.choices[0]!.message.tool_calls!;
const responseCall = response.output.find(
  (item): item is ResponseFunctionToolCall => item.type === "function_call",
)!;

let bridge: TestBridge;
beforeAll(async () => {
  bridge = await startTestBridge();
});
afterAll(async () => {
  await bridge?.close();
});

describe("OpenAI adapter: definitions", () => {
  const openai = createRemoteTaskOpenAITool({ env: {} });

  it("defines a strict Chat Completions function tool", () => {
    expect(openai.chatCompletionsTool).toEqual({
      type: "function",
      function: {
        name: "remote_task",
        description: openai.tool.description,
        strict: true,
        parameters: {
          type: "object",
          properties: {
            command: { type: "string", description: expect.any(String) },
            timeout: { type: ["number", "null"], description: expect.any(String) },
          },
          required: ["command", "timeout"],
          additionalProperties: false,
        },
      },
    });
  });

  it("defines the same tool for the Responses API", () => {
    expect(openai.responsesTool).toEqual({
      type: "function",
      name: "remote_task",
      description: openai.tool.description,
      strict: true,
      parameters: openai.chatCompletionsTool.function.parameters,
    });
  });

  it("uses the plain JSON Schema when strict mode is off", () => {
    const loose = createRemoteTaskOpenAITool({ env: {} }, { strict: false });
    expect(loose.responsesTool.strict).toBe(false);
    expect(loose.responsesTool.parameters).toEqual(loose.tool.jsonSchema);
  });
});

describe("OpenAI adapter: handleToolCall (recorded calls, real bridge)", () => {
  it("answers Chat Completions tool calls with tool messages", async () => {
    const openai = createRemoteTaskOpenAITool({ client: bridge.client });
    const messages: ChatCompletionToolMessageParam[] = await Promise.all(
      chatCalls.map((call) => openai.handleToolCall(call)),
    );
    expect(messages).toEqual([
      { role: "tool", tool_call_id: "call_Zq8m2VbR0cX4kTn7pLw1sYhE", content: "2\n" },
      {
        role: "tool",
        tool_call_id: "call_Hn3cW5tY9aQ1rU7eK2mXo6Bd",
        content: "broken\n\n\nCommand exited with code 2",
      },
    ]);
    // `timeout: null` (strict mode) means the default; a number is passed on.
    const spec = (command: string) => bridge.started.find((s) => s.command === command);
    expect(spec("printf 'alpha\\nbeta\\n' | wc -l")?.timeoutMs).toBe(120_000);
    expect(spec("echo broken >&2; exit 2")?.timeoutMs).toBe(30_000);
  });

  it("answers a Responses function_call with a function_call_output item", async () => {
    const openai = createRemoteTaskOpenAITool({ client: bridge.client });
    const item: ResponseInputItem.FunctionCallOutput = await openai.handleToolCall(responseCall);
    expect(item).toEqual({
      type: "function_call_output",
      call_id: "call_Lk5pQ2wE8rT1yU4iO7aS0dFg",
      output: "5\n",
    });
  });

  it("turns invalid JSON arguments into an error output without running anything", async () => {
    const openai = createRemoteTaskOpenAITool({ client: bridge.client });
    const before = bridge.started.length;
    const bad: ChatCompletionMessageToolCall = {
      id: "call_bad",
      type: "function",
      function: { name: "remote_task", arguments: '{"command": "ls' },
    };
    const message = await openai.handleToolCall(bad);
    expect(message).toEqual({
      role: "tool",
      tool_call_id: "call_bad",
      content:
        'Invalid remote_task arguments: not valid JSON. Pass {"command": "<shell command>", "timeout": <seconds, optional>}.',
    });
    const item = await openai.handleToolCall({ ...responseCall, arguments: "not json" });
    expect(item.output).toMatch(/^Invalid remote_task arguments: not valid JSON/);
    expect(bridge.started.length).toBe(before);
  });

  it("recognises only its own calls", async () => {
    const openai = createRemoteTaskOpenAITool({ client: bridge.client });
    const other: ResponseFunctionToolCall = { ...responseCall, name: "get_weather" };
    expect(openai.isRemoteTaskCall(responseCall)).toBe(true);
    expect(openai.isRemoteTaskCall(chatCalls[0]!)).toBe(true);
    expect(openai.isRemoteTaskCall(other)).toBe(false);
    const item = await openai.handleToolCall(other);
    expect(item.output).toBe('Unknown tool "get_weather": this handler only runs remote_task.');
  });

  it("runs concurrent calls in distinct sandboxes that cannot see each other's files", async () => {
    const openai = createRemoteTaskOpenAITool({ client: bridge.client });
    const before = bridge.started.length;
    const calls = [1, 2, 3, 4].map(
      (n): ResponseFunctionToolCall => ({
        type: "function_call",
        call_id: `call_${n}`,
        name: "remote_task",
        arguments: JSON.stringify({
          // Each writes its own file, waits for the others to write theirs, then lists.
          command: `echo ${n} > mine-${n}.txt; sleep 0.5; ls; cat mine-*.txt`,
          timeout: null,
        }),
      }),
    );
    const items = await Promise.all(calls.map((call) => openai.handleToolCall(call)));
    expect(items.map((item) => item.output)).toEqual(
      [1, 2, 3, 4].map((n) => `mine-${n}.txt\n${n}\n`),
    );
    const ids = bridge.started.slice(before).map((spec) => spec.sandboxId);
    expect(new Set(ids).size).toBe(4);
  });
});
