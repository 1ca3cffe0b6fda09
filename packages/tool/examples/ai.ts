// Vercel AI SDK: the tool in `generateText` / `streamText` / agents.

import { remoteTaskToolSet } from "@remote-task/tool/ai";
import { generateText, isStepCount } from "ai";

const { text } = await generateText({
  model: "openai/gpt-5.1",
  // `{ remote_task }` when the bridge is configured, `{}` otherwise.
  tools: { ...remoteTaskToolSet() },
  stopWhen: isStepCount(5),
  prompt: "How many primes are there below 10,000,000? Compute it, do not guess.",
});
console.log(text);
