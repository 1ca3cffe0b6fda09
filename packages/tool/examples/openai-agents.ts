// The OpenAI Agents SDK with remote_task, as in the README.
import { Agent, run } from "@openai/agents";
import { createRemoteTaskOpenAIAgentsTool } from "@remote-task/tool/openai-agents";

const agent = new Agent({
  name: "builder",
  instructions: "Use remote_task to run commands.",
  tools: [createRemoteTaskOpenAIAgentsTool()], // or ...remoteTaskOpenAIAgentsTools(process.env)
});
const result = await run(agent, "How many CPUs does the sandbox have?");
console.log(result.finalOutput);
