// pi-agent-core: an AgentTool for the Agent.
import { Agent } from "@mariozechner/pi-agent-core";
import { getModel } from "@mariozechner/pi-ai";
import { remoteTaskPiTools } from "@remote-task/tool/pi";

const agent = new Agent({
  initialState: {
    systemPrompt: "You can run throwaway shell commands with remote_task.",
    model: getModel("anthropic", "claude-sonnet-4-5"),
    tools: remoteTaskPiTools(), // [] when no bridge is configured
  },
});
agent.subscribe((event) => {
  if (event.type === "tool_execution_end") console.log(event.toolName, event.isError);
});
await agent.prompt("Fetch https://example.com with curl and report its <title>.");
