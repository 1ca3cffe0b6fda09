/**
 * Loads the tool's MCP server for the MCP command. The MCP SDK (and its HTTP stack) is an optional
 * peer of the command line, installed only by those who serve MCP: without it, the command says
 * which package to install instead of failing with a module-resolution stack trace.
 */

type McpModule = typeof import("@remote-task/tool/mcp");

/** What `remote-task mcp` and `remote-task-mcp` say when the MCP SDK is not installed. */
export const MCP_SDK_MISSING =
  "the MCP server needs @modelcontextprotocol/sdk, which is not installed (no other command needs it). Install it where remote-task is installed: npm install -g @modelcontextprotocol/sdk (or, in a project, npm install @modelcontextprotocol/sdk).";

/** The tool's MCP entry, or an error naming the missing MCP SDK. */
export async function loadMcpServer(
  load: () => Promise<McpModule> = () => import("@remote-task/tool/mcp"),
): Promise<McpModule> {
  try {
    return await load();
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    if (code === "ERR_MODULE_NOT_FOUND" && String(message).includes("'@modelcontextprotocol/sdk")) {
      throw new Error(MCP_SDK_MISSING);
    }
    throw error;
  }
}
