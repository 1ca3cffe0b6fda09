import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { silentLogger } from "@remote-task/bridge";
import { createLocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { describe, expect, it } from "vitest";
import { createRemoteTaskAiTool } from "../src/ai.js";
import { createRemoteTaskClaudeTool } from "../src/claude.js";
import { createRemoteTaskTool } from "../src/index.js";
import { createRemoteTaskBackend, createRemoteTaskLangChainTool } from "../src/langchain.js";
import { createRemoteTaskSandbox, MASTRA_SANDBOX_INSTRUCTIONS } from "../src/mastra.js";
import { createRemoteTaskMcpServer } from "../src/mcp.js";
import { createRemoteTaskOpenAITool } from "../src/openai.js";
import { createRemoteTaskOpenAIAgentsTool } from "../src/openai-agents.js";
import { createRemoteTaskPiTool } from "../src/pi.js";
import { SECRETS_PARAMETER_DESCRIPTION } from "../src/schema.js";
import { fakeClient, taskResult } from "./helpers/fake-client.js";

const ok = () => taskResult({ stdout: "ok\n" });
const NAMES = ["GH_TOKEN", "API_KEY"];

describe("the integrator's secrets: what the model is shown", () => {
  it("an optional `secrets` parameter, an enum of exactly the names given", () => {
    const tool = createRemoteTaskTool({ client: fakeClient(ok), secrets: NAMES });
    expect(tool.jsonSchema).toMatchObject({
      properties: {
        secrets: {
          type: "array",
          items: { type: "string", enum: NAMES },
          description: SECRETS_PARAMETER_DESCRIPTION,
        },
      },
      required: ["command"],
    });
    expect(SECRETS_PARAMETER_DESCRIPTION).toMatch(
      /^Names of credentials available as environment variables inside the sandbox; their values are never visible/,
    );
  });

  it("without secrets (or with none), the parameters and description are the reference's", () => {
    const plain = createRemoteTaskTool({ client: fakeClient(ok) });
    const empty = createRemoteTaskTool({ client: fakeClient(ok), secrets: [] });
    expect(Object.keys(plain.jsonSchema.properties as object)).toEqual(["command", "timeout"]);
    expect(empty.jsonSchema).toEqual(plain.jsonSchema);
    expect(empty.description).toBe(plain.description);
    expect(plain.description).not.toMatch(/secret|placeholder/i);
  });

  it("the description names the secrets and says the command sees placeholders", () => {
    const { description } = createRemoteTaskTool({ client: fakeClient(ok), secrets: NAMES });
    expect(description).toContain("list any of `GH_TOKEN`, `API_KEY` in `secrets`");
    expect(description).toContain('curl -H "Authorization: Bearer $GH_TOKEN"');
    expect(description).toMatch(/holds a placeholder, never the value/);
    expect(description).not.toMatch(
      /no credentials, tokens or environment variables are passed in\./,
    );
  });

  it("refuses names that are no secret names, or a name given twice, when the tool is created", () => {
    expect(() => createRemoteTaskTool({ client: fakeClient(ok), secrets: ["GH-TOKEN"] })).toThrow(
      /"GH-TOKEN" is not a secret name/,
    );
    expect(() => createRemoteTaskTool({ client: fakeClient(ok), secrets: ["A", "A"] })).toThrow(
      "secrets: A is given twice",
    );
    expect(() =>
      createRemoteTaskTool({ client: fakeClient(ok), secrets: "GH_TOKEN" as never }),
    ).toThrow(TypeError);
  });
});

describe("the integrator's secrets: calls", () => {
  it("passes the names the model lists to the client, and none when it lists none", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client, secrets: NAMES });
    await tool.execute({
      command: 'curl -H "Authorization: Bearer $GH_TOKEN" x',
      secrets: ["GH_TOKEN"],
    });
    await tool.execute({ command: "both", secrets: ["API_KEY", "GH_TOKEN", "API_KEY"] });
    // The reference tool's own call: no `secrets`, as before.
    await tool.execute({ command: "plain", timeout: 5 });
    await tool.execute({ command: "empty", secrets: [] });
    expect(client.runs.map((run) => run.options?.secrets)).toEqual([
      ["GH_TOKEN"],
      ["API_KEY", "GH_TOKEN"],
      undefined,
      undefined,
    ]);
    expect(client.runs[2]?.options).toEqual({ timeoutSeconds: 5, signal: undefined });
  });

  it("a name outside the option is a tool error that names what is offered; nothing is sent", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client, secrets: NAMES });
    expect(await tool.execute({ command: "x", secrets: ["AWS_KEY"] })).toEqual({
      text: 'Invalid remote_task arguments: secrets.0: "AWS_KEY" is not a secret this tool offers; it offers GH_TOKEN, API_KEY. Pass {"command": "<shell command>", "timeout": <seconds, optional>, "secrets": <some of ["GH_TOKEN", "API_KEY"], optional>}.',
      isError: true,
      status: "error",
    });
    expect(client.runs).toEqual([]);
  });

  it("a tool that offers none refuses a call asking for one, instead of running it without", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client });
    expect(await tool.execute({ command: "x", secrets: ["GH_TOKEN"] })).toEqual({
      text: 'Invalid remote_task arguments: secrets: this tool offers no secrets, so the command did not run. Leave out "secrets"; commands run without credentials here.',
      isError: true,
      status: "error",
    });
    expect(client.runs).toEqual([]);
    await tool.execute({ command: "y", secrets: [] });
    expect(client.runs.map((run) => run.command)).toEqual(["y"]);
  });
});

describe("the integrator's secrets in every adapter", () => {
  it("the schema-carrying adapters show the `secrets` parameter", () => {
    const source = { client: fakeClient(ok), secrets: NAMES };
    const enumOf = (schema: unknown) =>
      (schema as { properties: { secrets?: { items?: { enum?: unknown } } } }).properties.secrets
        ?.items?.enum;
    expect(createRemoteTaskPiTool(source).parameters).toMatchObject({
      properties: { secrets: { items: { enum: NAMES } } },
    });
    expect(Object.keys(createRemoteTaskClaudeTool(source).inputSchema)).toEqual([
      "command",
      "timeout",
      "secrets",
    ]);
    const ai = createRemoteTaskAiTool(source).inputSchema as { shape?: Record<string, unknown> };
    expect(Object.keys(ai.shape ?? {})).toContain("secrets");
    const langchain = createRemoteTaskLangChainTool(source).schema as { shape?: object };
    expect(Object.keys(langchain.shape ?? {})).toContain("secrets");
    const agents = createRemoteTaskOpenAIAgentsTool(source);
    expect(enumOf(agents.parameters)).toEqual(NAMES);
    expect(agents.parameters.required).toEqual(["command", "timeout", "secrets"]);
  });

  it("OpenAI strict mode: `secrets` nullable and required; null means none", async () => {
    const client = fakeClient(ok);
    const remote = createRemoteTaskOpenAITool({ client, secrets: NAMES });
    expect(remote.responsesTool.parameters).toEqual({
      type: "object",
      properties: {
        command: { type: "string", description: expect.any(String) },
        timeout: { type: ["number", "null"], description: expect.any(String) },
        secrets: {
          type: ["array", "null"],
          description: SECRETS_PARAMETER_DESCRIPTION,
          items: { type: "string", enum: NAMES },
        },
      },
      required: ["command", "timeout", "secrets"],
      additionalProperties: false,
    });
    const call = (args: object) => ({
      type: "function_call" as const,
      call_id: "c",
      name: "remote_task",
      arguments: JSON.stringify(args),
    });
    await remote.handleToolCall(call({ command: "a", timeout: null, secrets: null }));
    await remote.handleToolCall(call({ command: "b", timeout: null, secrets: ["API_KEY"] }));
    expect(client.runs.map((run) => run.options?.secrets)).toEqual([undefined, ["API_KEY"]]);
    // Without secrets the strict schema is the one it always was.
    const plain = createRemoteTaskOpenAITool({ client });
    expect(plain.responsesTool.parameters.required).toEqual(["command", "timeout"]);
  });

  it("Mastra and deepagents, whose frameworks define the arguments, send them on every command", async () => {
    const client = fakeClient(ok);
    const sandbox = createRemoteTaskSandbox({ client, secrets: ["GH_TOKEN"] });
    await sandbox.executeCommand("gh", ["api", "user"]);
    expect(sandbox.getInstructions()).toContain(
      "Credentials are in environment variables $GH_TOKEN: each holds a placeholder, never the value",
    );
    expect(createRemoteTaskSandbox({ client }).getInstructions()).toBe(MASTRA_SANDBOX_INSTRUCTIONS);
    const backend = createRemoteTaskBackend({ client, secrets: ["API_KEY"] });
    await backend.execute("true");
    await createRemoteTaskBackend({ client }).execute("plain");
    expect(client.runs.map((run) => run.options?.secrets)).toEqual([
      ["GH_TOKEN"],
      ["API_KEY"],
      undefined,
    ]);
  });

  it("MCP: the server lists the parameter and passes the names on", async () => {
    const client = fakeClient(ok);
    const server = createRemoteTaskMcpServer({ client, secrets: NAMES });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const mcp = new Client({ name: "secrets-test", version: "1.0.0" });
    try {
      await server.connect(serverSide);
      await mcp.connect(clientSide);
      const { tools } = await mcp.listTools();
      expect(tools[0]?.inputSchema.properties?.secrets).toMatchObject({
        type: "array",
        items: { enum: NAMES },
      });
      await mcp.callTool({
        name: "remote_task",
        arguments: { command: "x", secrets: ["GH_TOKEN"] },
      });
      expect(client.runs.map((run) => run.options?.secrets)).toEqual([["GH_TOKEN"]]);
    } finally {
      await mcp.close();
      await server.close();
    }
  });
});

/** Whether this machine runs bubblewrap sandboxes, which inject secrets. */
const bwrapWorks = (() => {
  try {
    createLocalBackend({ isolation: "bwrap" });
    return true;
  } catch {
    return false;
  }
})();

describe.skipIf(!bwrapWorks)("the integrator's secrets on a real bridge that declares them", () => {
  it("the command sees a placeholder, never the value; a name the bridge lacks reads its refusal", {
    timeout: 60_000,
  }, async () => {
    const value = `ghp_tool_test_${process.pid}_0123456789abcdef`;
    const variable = `RT_TOOL_TEST_GH_${process.pid}`;
    process.env[variable] = value;
    let bridge: EmbeddedBridge | undefined;
    const tool = () =>
      createRemoteTaskTool({
        env: { CLOUDFLARE_SANDBOX_URL: bridge?.url, CLOUDFLARE_SANDBOX_TOKEN: bridge?.token },
        secrets: ["GH_TOKEN", "API_KEY"],
      });
    try {
      bridge = await startEmbeddedBridge({
        local: { isolation: "bwrap" },
        logger: silentLogger,
        secrets: { GH_TOKEN: { from: { env: variable }, hosts: ["api.github.com"] } },
      });
      const remote = tool();
      const seen = await remote.execute({ command: 'echo "$GH_TOKEN"', secrets: ["GH_TOKEN"] });
      expect(seen.isError).toBe(false);
      expect(seen.text).toMatch(/^rt_secret_[0-9a-f]{32}\n$/);
      expect(seen.text).not.toContain(value);
      const without = await remote.execute({ command: 'echo "[$GH_TOKEN]"' });
      expect(without.text).toBe("[]\n");
      const refused = await remote.execute({ command: "true", secrets: ["API_KEY"] });
      expect(refused).toMatchObject({ isError: true, status: "error" });
      expect(refused.text).toBe(
        "The call asks for secrets this bridge does not declare (API_KEY), so the command did not run; it declares GH_TOKEN.",
      );
      await remote.close();
    } finally {
      delete process.env[variable];
      await bridge?.close();
    }
  });
});
