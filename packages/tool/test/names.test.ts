import { describe, expect, it } from "vitest";
import * as ai from "../src/ai.js";
import * as claude from "../src/claude.js";
import * as core from "../src/index.js";
import * as langchain from "../src/langchain.js";
import * as mastra from "../src/mastra.js";
import * as mcp from "../src/mcp.js";
import * as openai from "../src/openai.js";
import * as openaiAgents from "../src/openai-agents.js";
import * as pi from "../src/pi.js";

describe("adapter factory names", () => {
  it("follow one pattern: createRemoteTask<Thing> on every entry, and nothing else", () => {
    const factories = (entry: object) =>
      Object.keys(entry)
        .filter((name) => name.startsWith("create"))
        .sort();
    expect(factories(core)).toEqual(["createRemoteTaskTool"]);
    expect(factories(ai)).toEqual(["createRemoteTaskAiTool"]);
    expect(factories(mcp)).toEqual(["createRemoteTaskMcpServer"]);
    expect(factories(openai)).toEqual(["createRemoteTaskOpenAITool"]);
    expect(factories(openaiAgents)).toEqual(["createRemoteTaskOpenAIAgentsTool"]);
    expect(factories(pi)).toEqual(["createRemoteTaskPiTool"]);
    expect(factories(claude)).toEqual(["createRemoteTaskClaudeTool"]);
    expect(factories(mastra)).toEqual(["createRemoteTaskSandbox"]);
    expect(factories(langchain)).toEqual([
      "createRemoteTaskBackend",
      "createRemoteTaskLangChainTool",
    ]);
  });

  it("have no deprecated aliases (nothing was published under the earlier names)", () => {
    expect("remoteTaskTool" in ai).toBe(false);
    expect("createMcpServer" in mcp).toBe(false);
    expect("createRemoteTaskOpenAI" in openai).toBe(false);
    expect("createRemoteTaskAgentTool" in pi).toBe(false);
    expect("createRemoteTaskAgentsTool" in openaiAgents).toBe(false);
  });
});
