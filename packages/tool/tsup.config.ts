import { defineConfig } from "tsup";

// Optional peers and the openai types package stay imports for the user's install to resolve.
const peers = [
  "ai",
  "@modelcontextprotocol/sdk",
  "@mariozechner/pi-agent-core",
  "openai",
  "@openai/agents",
];

export default defineConfig([
  {
    entry: [
      "src/index.ts",
      "src/ai.ts",
      "src/mcp.ts",
      "src/pi.ts",
      "src/openai.ts",
      "src/openai-agents.ts",
    ],
    format: ["esm", "cjs"],
    dts: true,
    sourcemap: true,
    // Both builds write to dist/ at once: this one leaves the bin's files alone.
    clean: ["!mcp-bin.js", "!mcp-bin.js.map"],
    target: "node20",
    external: peers,
    // The private helpers package is inlined: the published package never depends on it.
    noExternal: ["@remote-task/internal"],
  },
  {
    // The bin, ESM only (bin/remote-task-mcp.js runs it). It loads the MCP adapter through the
    // package's own `./mcp` export, so that code is not bundled twice; its `#!/usr/bin/env node`
    // line stays on this entry only.
    entry: ["src/mcp-bin.ts"],
    format: ["esm"],
    sourcemap: true,
    target: "node20",
    external: [...peers, "@remote-task/tool"],
    noExternal: ["@remote-task/internal"],
  },
]);
