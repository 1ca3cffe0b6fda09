// OpenAI Responses API: a function tool and its function_call_output items.

import { createRemoteTaskOpenAITool } from "@remote-task/tool/openai";
import OpenAI from "openai";

const openai = new OpenAI();
const remote = createRemoteTaskOpenAITool(); // configured from process.env
const tools = [remote.responsesTool];

let response = await openai.responses.create({
  model: "gpt-5.1",
  tools,
  input: "What is the SHA-256 of the string 'remote'? Compute it.",
});
for (;;) {
  const calls = response.output.filter((item) => item.type === "function_call");
  if (calls.length === 0) break;
  response = await openai.responses.create({
    model: "gpt-5.1",
    tools,
    previous_response_id: response.id,
    // Calls run in parallel, each in its own sandbox.
    input: await Promise.all(calls.map((call) => remote.handleToolCall(call))),
  });
}
console.log(response.output_text);
await remote.tool.close();
