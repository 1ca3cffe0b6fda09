import { describe, expect, it } from "vitest";
import * as ai from "../src/ai.js";
import * as core from "../src/index.js";
import * as mcp from "../src/mcp.js";
import * as openai from "../src/openai.js";
import * as pi from "../src/pi.js";

describe("adapter factory names", () => {
  it("follow one pattern: createRemoteTask<Thing> on every entry", () => {
    const factories = (entry: object) =>
      Object.keys(entry)
        .filter((name) => name.startsWith("createRemoteTask"))
        .sort();
    expect(factories(core)).toEqual(["createRemoteTaskTool"]);
    expect(factories(ai)).toEqual(["createRemoteTaskAiTool"]);
    expect(factories(mcp)).toEqual(["createRemoteTaskMcpServer"]);
    expect(factories(openai)).toEqual(["createRemoteTaskOpenAI", "createRemoteTaskOpenAITool"]);
    expect(factories(pi)).toEqual(["createRemoteTaskAgentTool"]);
  });

  it("keep the earlier names as deprecated aliases of the same functions", () => {
    expect(ai.remoteTaskTool).toBe(ai.createRemoteTaskAiTool);
    expect(mcp.createMcpServer).toBe(mcp.createRemoteTaskMcpServer);
    expect(openai.createRemoteTaskOpenAI).toBe(openai.createRemoteTaskOpenAITool);
  });
});
