/**
 * `remote_task` for OpenAI function calling: the tool definitions for the Chat Completions and
 * Responses APIs, and `handleToolCall()` turning a model's call into the message or input item to
 * send back. Nothing here imports the `openai` package, types included: the shapes below are the
 * parts of its types this adapter reads or writes (the same in `openai` 5, 6 and 7), so a project
 * without `openai` typechecks this entry too. Failures (invalid JSON arguments included) become
 * output text, never a throw.
 */
import { errorResult, type RemoteTaskToolResult } from "./result.js";
import { strictSchema, withoutNullArguments } from "./strict-schema.js";
import {
  type ExecuteOptions,
  type RemoteTaskTool,
  type RemoteTaskToolSource,
  toRemoteTaskTool,
} from "./tool.js";

/** A Chat Completions function tool definition (`ChatCompletionFunctionTool` in `openai`). */
interface ChatCompletionFunctionTool {
  type: "function";
  function: {
    name: string;
    description: string;
    parameters: Record<string, unknown>;
    strict: boolean;
  };
}

/** A Chat Completions tool call (`ChatCompletionMessageToolCall`: a function or custom call). */
type ChatCompletionMessageToolCall =
  | { id: string; type: "function"; function: { name: string; arguments: string } }
  | { id: string; type: "custom"; custom: { name: string; input: string } };

/** The `tool` message answering a Chat Completions tool call. */
interface ChatCompletionToolMessageParam {
  role: "tool";
  tool_call_id: string;
  content: string;
}

/** A Responses API function tool definition (`FunctionTool`). */
interface FunctionTool {
  type: "function";
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  strict: boolean;
}

/** A Responses API `function_call` output item (`ResponseFunctionToolCall`). */
interface ResponseFunctionToolCall {
  type: "function_call";
  call_id: string;
  name: string;
  arguments: string;
}

/** The input item answering a `function_call` (`FunctionCallOutput`). */
interface FunctionCallOutput {
  type: "function_call_output";
  call_id: string;
  output: string;
}

export type OpenAIToolOptions = {
  /**
   * Use OpenAI strict mode (default true): every property required, `timeout` nullable (null
   * means the default), no extra properties, so the model always produces valid arguments.
   */
  strict?: boolean | undefined;
};

export interface RemoteTaskOpenAITool {
  /** The core tool the calls run through. */
  readonly tool: RemoteTaskTool;
  /** For `chat.completions.create({ tools: [chatCompletionsTool] })`. */
  readonly chatCompletionsTool: ChatCompletionFunctionTool;
  /** For `responses.create({ tools: [responsesTool] })`. */
  readonly responsesTool: FunctionTool;
  /** True when `call` is a call of `remote_task` (either API shape). */
  isRemoteTaskCall(call: ChatCompletionMessageToolCall | ResponseFunctionToolCall): boolean;
  /** Runs a Chat Completions tool call; answer with the returned `tool` message. */
  handleToolCall(
    call: ChatCompletionMessageToolCall,
    options?: ExecuteOptions,
  ): Promise<ChatCompletionToolMessageParam>;
  /** Runs a Responses `function_call` item; answer with the returned `function_call_output`. */
  handleToolCall(
    call: ResponseFunctionToolCall,
    options?: ExecuteOptions,
  ): Promise<FunctionCallOutput>;
}

function parseArguments(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: withoutNullArguments(JSON.parse(text === "" ? "{}" : text)) };
  } catch {
    return { ok: false };
  }
}

/** Creates the OpenAI tool definitions and the call handler for one `remote_task` tool. */
export function createRemoteTaskOpenAITool(
  source: RemoteTaskToolSource = {},
  options: OpenAIToolOptions = {},
): RemoteTaskOpenAITool {
  const tool = toRemoteTaskTool(source);
  const strict = options.strict ?? true;
  const parameters = strict ? strictSchema(tool.jsonSchema) : tool.jsonSchema;

  const run = async (
    name: string,
    args: string,
    execOptions: ExecuteOptions | undefined,
  ): Promise<RemoteTaskToolResult> => {
    if (name !== tool.name) {
      return errorResult(`Unknown tool "${name}": this handler only runs ${tool.name}.`);
    }
    const parsed = parseArguments(args);
    if (!parsed.ok) {
      return errorResult(
        `Invalid ${tool.name} arguments: not valid JSON. Pass {"command": "<shell command>", "timeout": <seconds, optional>}.`,
      );
    }
    return tool.execute(parsed.value, execOptions);
  };

  function isRemoteTaskCall(call: ChatCompletionMessageToolCall | ResponseFunctionToolCall) {
    if (call.type === "function_call") return call.name === tool.name;
    return call.type === "function" && call.function.name === tool.name;
  }

  async function handleToolCall(
    call: ChatCompletionMessageToolCall,
    execOptions?: ExecuteOptions,
  ): Promise<ChatCompletionToolMessageParam>;
  async function handleToolCall(
    call: ResponseFunctionToolCall,
    execOptions?: ExecuteOptions,
  ): Promise<FunctionCallOutput>;
  async function handleToolCall(
    call: ChatCompletionMessageToolCall | ResponseFunctionToolCall,
    execOptions?: ExecuteOptions,
  ): Promise<ChatCompletionToolMessageParam | FunctionCallOutput> {
    if (call.type === "function_call") {
      const result = await run(call.name, call.arguments, execOptions);
      return { type: "function_call_output", call_id: call.call_id, output: result.text };
    }
    const result =
      call.type === "function"
        ? await run(call.function.name, call.function.arguments, execOptions)
        : errorResult(`${tool.name} is a function tool; custom tool calls are not supported.`);
    return { role: "tool", tool_call_id: call.id, content: result.text };
  }

  return {
    tool,
    chatCompletionsTool: {
      type: "function",
      function: { name: tool.name, description: tool.description, parameters, strict },
    },
    responsesTool: {
      type: "function",
      name: tool.name,
      description: tool.description,
      parameters,
      strict,
    },
    isRemoteTaskCall,
    handleToolCall,
  };
}
