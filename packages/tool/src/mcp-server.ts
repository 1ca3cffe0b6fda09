/**
 * `remote_task` as a Model Context Protocol server (official `@modelcontextprotocol/sdk` ^1.23).
 * MCP cancellation (`notifications/cancelled`) aborts the call, which stops the remote command;
 * every failure is a tool result with `isError: true`, never a protocol error.
 */

import type { Readable, Writable } from "node:stream";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { clientFromEnv, type RemoteTaskClient } from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import { version } from "../package.json";
import { toCallToolResult } from "./result.js";
import {
  createRemoteTaskTool,
  type EnvLike,
  type RemoteTaskTool,
  type RemoteTaskToolOptions,
} from "./tool.js";

/** Name the server reports in its MCP `serverInfo`. */
export const MCP_SERVER_NAME = "remote-task";

export type RemoteTaskMcpServerOptions = RemoteTaskToolOptions & {
  /** A ready tool to expose instead of creating one from the other options. */
  tool?: RemoteTaskTool | undefined;
  /** `serverInfo.name` (default `remote-task`). */
  name?: string | undefined;
};

/**
 * Creates an MCP server exposing `remote_task`. Without an injected `client` or `tool` it creates
 * a client from `env` (default `process.env`) right away, so a missing or invalid
 * `CLOUDFLARE_SANDBOX_URL` throws the client's `ConfigurationError` here instead of advertising
 * a tool that cannot run. That client is closed when the server closes.
 */
export function createRemoteTaskMcpServer(options: RemoteTaskMcpServerOptions = {}): McpServer {
  let owned: RemoteTaskClient | undefined;
  let tool = options.tool;
  if (!tool) {
    const { tool: _tool, name: _name, ...toolOptions } = options;
    if (toolOptions.client) {
      tool = createRemoteTaskTool(toolOptions);
    } else {
      owned = clientFromEnv(toolOptions.env ?? process.env);
      tool = createRemoteTaskTool({
        client: owned,
        defaultTimeoutSeconds: toolOptions.defaultTimeoutSeconds,
        description: toolOptions.description,
        network: toolOptions.network,
        secrets: toolOptions.secrets,
      });
    }
  }
  const core = tool;
  const server = new McpServer(
    { name: options.name ?? MCP_SERVER_NAME, version },
    { capabilities: { tools: {} } },
  );
  server.registerTool(
    core.name,
    {
      title: core.title,
      description: core.description,
      inputSchema: core.parameters,
      annotations: {
        title: core.title,
        // It runs arbitrary commands, but in a throwaway sandbox: nothing on the host changes.
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: true,
      },
    },
    async (args, extra) => toCallToolResult(await core.execute(args, { signal: extra.signal })),
  );
  // The SDK checks arguments against the schema before the handler runs, with its own words
  // ("Input validation error: …"); the tool's check says the same as every other adapter
  // ("Invalid remote_task arguments: …"), so calls go to the tool unchecked.
  server.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    if (request.params.name !== core.name) {
      throw new McpError(ErrorCode.InvalidParams, `Tool ${request.params.name} not found`);
    }
    return toCallToolResult(await core.execute(request.params.arguments, { signal: extra.signal }));
  });
  if (owned) {
    const client = owned;
    const previous = server.server.onclose;
    server.server.onclose = () => {
      previous?.();
      void client.close();
    };
  }
  return server;
}

export interface McpStdioOptions {
  /** Variables configuring the bridge (default `process.env`). */
  env?: EnvLike | undefined;
  /** Where every call's command may connect (default: the bridge's default). */
  network?: NetworkPolicy | undefined;
  /**
   * Names of the bridge's secrets the model may ask for (the tool's `secrets` option): offered
   * as the tool's optional `secrets` parameter.
   */
  secrets?: readonly string[] | undefined;
  /** Streams to speak MCP over (default `process.stdin` / `process.stdout`). */
  stdin?: Readable | undefined;
  stdout?: Writable | undefined;
}

/**
 * Serves `remote_task` over stdio until the input closes; what `remote-task-mcp` and
 * `remote-task mcp` run. Throws `ConfigurationError` when the environment configures no bridge.
 */
export async function runMcpStdio(options: McpStdioOptions = {}): Promise<McpServer> {
  const server = createRemoteTaskMcpServer({
    env: options.env ?? process.env,
    network: options.network,
    secrets: options.secrets,
  });
  const stdin = options.stdin ?? process.stdin;
  await server.connect(new StdioServerTransport(stdin, options.stdout ?? process.stdout));
  // The MCP client ends a stdio session by closing our input: shut down (and close the client).
  stdin.once("end", () => void server.close());
  return server;
}
