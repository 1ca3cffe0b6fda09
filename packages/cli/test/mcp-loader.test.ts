import { describe, expect, it } from "vitest";
import { loadMcpServer, MCP_SDK_MISSING } from "../src/mcp-loader.js";

/** An import failure as Node.js reports a package that is not installed. */
function notFound(name: string) {
  return Object.assign(
    new Error(`Cannot find package '${name}' imported from /app/node_modules/x/dist/mcp.js`),
    { code: "ERR_MODULE_NOT_FOUND" },
  );
}

describe("the MCP command without the MCP SDK", () => {
  it("names the package to install", async () => {
    await expect(
      loadMcpServer(() => Promise.reject(notFound("@modelcontextprotocol/sdk"))),
    ).rejects.toThrow(MCP_SDK_MISSING);
    expect(MCP_SDK_MISSING).toContain("npm install -g @modelcontextprotocol/sdk");
  });

  it("passes any other failure on as it is", async () => {
    const other = notFound("something-else");
    await expect(loadMcpServer(() => Promise.reject(other))).rejects.toBe(other);
  });

  it("loads the MCP server when the SDK is installed", async () => {
    const mcp = await loadMcpServer();
    expect(typeof mcp.runMcpStdio).toBe("function");
  });
});
