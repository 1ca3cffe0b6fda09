/**
 * `remote_task` as a Model Context Protocol server (official `@modelcontextprotocol/sdk` ^1.23):
 * the server itself, and the command both `remote-task-mcp` and `remote-task mcp` run.
 */

export { runMcpCommand } from "./mcp-command.js";
export {
  createRemoteTaskMcpServer,
  MCP_SERVER_NAME,
  type McpStdioOptions,
  type RemoteTaskMcpServerOptions,
  runMcpStdio,
} from "./mcp-server.js";
