import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  getDefaultEnvironment,
  StdioClientTransport,
} from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestBridge, type TestBridge } from "./helpers/bridge.js";
import { distFile } from "./helpers/dist.js";

let bridge: TestBridge;
let client: Client;

beforeAll(async () => {
  bridge = await startTestBridge();
  // The built entry served on stdio as the command line's MCP command serves it: a child process
  // configured by environment.
  const serve = `import { runMcpStdio } from ${JSON.stringify(pathToFileURL(distFile("mcp.js")).href)}; await runMcpStdio();`;
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ["--input-type=module", "-e", serve],
    env: { ...getDefaultEnvironment(), ...bridge.env },
    stderr: "pipe",
  });
  client = new Client({ name: "remote-task-test", version: "1.0.0" });
  await client.connect(transport);
});

afterAll(async () => {
  await client?.close();
  await bridge?.close();
});

function textOf(result: Awaited<ReturnType<Client["callTool"]>>): string {
  const content = result.content as Array<{ type: string; text?: string }>;
  return content.map((c) => c.text ?? "").join("");
}

describe("MCP stdio server (real SDK client, built entry, real bridge)", () => {
  it("lists remote_task with its schema and annotations", async () => {
    const { tools } = await client.listTools();
    expect(tools).toHaveLength(1);
    const tool = tools[0]!;
    expect(tool.name).toBe("remote_task");
    expect(tool.title).toBe("Remote task");
    expect(tool.description).toMatch(/fresh, throwaway remote sandbox/);
    expect(tool.inputSchema).toMatchObject({
      type: "object",
      properties: { command: { type: "string" }, timeout: { type: "number" } },
      required: ["command"],
    });
    expect(tool.annotations).toEqual({
      title: "Remote task",
      readOnlyHint: false,
      destructiveHint: false,
      idempotentHint: false,
      openWorldHint: true,
    });
    expect(client.getServerVersion()?.name).toBe("remote-task");
  });

  it("runs a call and returns its output", async () => {
    const result = await client.callTool({
      name: "remote_task",
      arguments: { command: "echo out; echo err >&2" },
    });
    expect(result.isError).toBe(false);
    expect(textOf(result)).toBe("out\n\nerr\n");
  });

  it("returns a non-zero exit as an isError result with the reference text", async () => {
    const result = await client.callTool({ name: "remote_task", arguments: { command: "exit 7" } });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe("(no output)\n\nCommand exited with code 7");
  });

  it("returns invalid arguments as an isError result", async () => {
    const result = await client.callTool({ name: "remote_task", arguments: { command: "" } });
    expect(result.isError).toBe(true);
    // The same words as every adapter (not the MCP SDK's "Input validation error: …").
    expect(textOf(result)).toBe(
      'Invalid remote_task arguments: command must not be empty. Pass {"command": "<shell command>", "timeout": <seconds, optional>}.',
    );
    const timeout = await client.callTool({
      name: "remote_task",
      arguments: { command: "true", timeout: 0 },
    });
    expect(textOf(timeout)).toMatch(
      /^Invalid remote_task arguments: timeout must be greater than 0\./,
    );
  });

  it("a cancelled call stops the remote command", async () => {
    const controller = new AbortController();
    const started = bridge.nextStart();
    const call = client.callTool(
      { name: "remote_task", arguments: { command: "sleep 30" } },
      undefined,
      { signal: controller.signal },
    );
    const spec = await started;
    controller.abort();
    await expect(call).rejects.toThrow();
    // MCP's notifications/cancelled reached the server, which aborted the bridge call.
    await bridge.destroyed(spec.sandboxId);
    expect(spec.signal.aborted).toBe(true);
    expect(bridge.live()).toBe(0);
  });

  it("runs concurrent calls in distinct sandboxes", async () => {
    const before = bridge.started.length;
    const results = await Promise.all(
      [1, 2, 3].map((n) =>
        client.callTool({
          name: "remote_task",
          arguments: { command: `echo ${n} > f; sleep 0.3; ls | wc -l; cat f` },
        }),
      ),
    );
    expect(results.map(textOf)).toEqual(["1\n1\n", "1\n2\n", "1\n3\n"]);
    expect(new Set(bridge.started.slice(before).map((s) => s.sandboxId)).size).toBe(3);
  });
});
