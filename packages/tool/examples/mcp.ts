// MCP: the stdio server, or the same server on another transport.
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createRemoteTaskMcpServer, runMcpStdio } from "@remote-task/tool/mcp";

if (process.argv.includes("--stdio")) {
  await runMcpStdio(); // what remote-task-mcp and `remote-task mcp` do
} else {
  const server = createRemoteTaskMcpServer({ env: process.env }); // throws ConfigurationError if unconfigured
  await server.connect(
    new StreamableHTTPServerTransport({ sessionIdGenerator: () => crypto.randomUUID() }),
  );
}
