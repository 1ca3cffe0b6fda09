import { once } from "node:events";
import { createServer } from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { ForbiddenError } from "@remote-task/client";
import { type ExecRequest, execRequestSchema } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import { createRemoteTaskTool } from "../src/index.js";
import { createRemoteTaskMcpServer } from "../src/mcp.js";
import { fakeClient, taskResult } from "./helpers/fake-client.js";

const ok = () => taskResult({ stdout: "ok\n" });

describe("the integrator's network policy", () => {
  it("is sent on every call; the model's arguments cannot change or widen it", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client, network: { allow: ["pypi.org"] } });
    await tool.execute({ command: "pip download requests" });
    await tool.execute({ command: "curl evil.example", network: "open" });
    await tool.execute({ command: "x", network: { allow: ["evil.example"] }, timeout: 5 });
    expect(client.runs.map((run) => run.options?.network)).toEqual([
      { allow: ["pypi.org"] },
      { allow: ["pypi.org"] },
      { allow: ["pypi.org"] },
    ]);
  });

  it("without one, no policy is sent (the bridge's default), whatever the model passes", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client });
    await tool.execute({ command: "x", network: "open", stdin: "data" });
    expect(client.runs[0]?.options).not.toHaveProperty("network");
    expect(client.runs[0]?.options).not.toHaveProperty("stdin");
  });

  it("gives the model no network or stdin parameter", () => {
    const plain = createRemoteTaskTool({ client: fakeClient(ok) });
    const limited = createRemoteTaskTool({ client: fakeClient(ok), network: "none" });
    expect(limited.jsonSchema).toEqual(plain.jsonSchema);
    expect(Object.keys(limited.jsonSchema.properties as object)).toEqual(["command", "timeout"]);
  });

  it("refuses an invalid policy when the tool is created", () => {
    expect(() =>
      createRemoteTaskTool({ client: fakeClient(ok), network: { allow: ["https://x.org"] } }),
    ).toThrow(/network must be "none", "open" or \{allow: \[host patterns\]\}/);
    expect(() =>
      createRemoteTaskTool({ client: fakeClient(ok), network: "internet" as never }),
    ).toThrow(TypeError);
  });

  it("a call over the bridge's ceiling shows the model the bridge's words", async () => {
    const words = "network open is more than this bridge allows (ceiling: none)";
    const tool = createRemoteTaskTool({
      network: "open",
      client: fakeClient(() => {
        throw new ForbiddenError("The bridge refused the call ...", {
          status: 403,
          code: "forbidden",
          bridgeMessage: words,
        });
      }),
    });
    expect(await tool.execute({ command: "x" })).toEqual({
      text: words,
      isError: true,
      status: "error",
    });
    const silent = createRemoteTaskTool({
      client: fakeClient(() => {
        throw new ForbiddenError("The bridge refused the call ...", { status: 403 });
      }),
    });
    expect((await silent.execute({ command: "x" })).text).toBe("remote sandbox returned HTTP 403");
  });

  it("the MCP server configured from env sends it with each call", async () => {
    const received: ExecRequest[] = [];
    const bridge = createServer(async (req, res) => {
      if (req.method === "GET" && req.url === "/health") {
        // A bridge that enforces network policies (the client asks before the first one).
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ ok: true, protocol: 2, network: { default: "none", ceiling: "open" } }),
        );
        return;
      }
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      received.push(execRequestSchema.parse(JSON.parse(Buffer.concat(chunks).toString("utf8"))));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ stdout: "ok\n", stderr: "", code: 0 }));
    }).listen(0, "127.0.0.1");
    await once(bridge, "listening");
    const url = `http://127.0.0.1:${(bridge.address() as { port: number }).port}`;
    const server = createRemoteTaskMcpServer({
      env: { CLOUDFLARE_SANDBOX_URL: url },
      network: "none",
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: "network-test", version: "1.0.0" });
    try {
      await server.connect(serverSide);
      await client.connect(clientSide);
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: "true", network: "open" },
      });
      expect(result.isError).toBe(false);
      expect(received.map((request) => request.network)).toEqual(["none"]);
    } finally {
      await client.close();
      await server.close();
      bridge.closeAllConnections();
      bridge.close();
    }
  });
});
