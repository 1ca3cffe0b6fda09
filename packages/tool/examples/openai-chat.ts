// OpenAI Chat Completions: a function tool and its `tool` messages.

import { createRemoteTaskOpenAITool } from "@remote-task/tool/openai";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";

const openai = new OpenAI();
const remote = createRemoteTaskOpenAITool();
const messages: ChatCompletionMessageParam[] = [
  { role: "user", content: "List the Python version and installed pip packages of the sandbox." },
];

for (;;) {
  const completion = await openai.chat.completions.create({
    model: "gpt-5.1",
    tools: [remote.chatCompletionsTool],
    messages,
  });
  const message = completion.choices[0]!.message;
  messages.push(message);
  if (!message.tool_calls?.length) {
    console.log(message.content);
    break;
  }
  messages.push(
    ...(await Promise.all(message.tool_calls.map((call) => remote.handleToolCall(call)))),
  );
}
await remote.tool.close();
