/**
 * `remote_task` as a Model Context Protocol server (official `@modelcontextprotocol/sdk` ^1.23):
 * the server, and serving it on stdio (what the command line's `remote-task mcp` and
 * `remote-task-mcp` run).
 */

export {
  createRemoteTaskMcpServer,
  MCP_SERVER_NAME,
  type McpStdioOptions,
  type RemoteTaskMcpServerOptions,
  runMcpStdio,
} from "./mcp-server.js";
