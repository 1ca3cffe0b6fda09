import { defineConfig } from "tsup";

const library = ["src/index.ts", "src/ai.ts", "src/mcp.ts", "src/pi.ts", "src/openai.ts"];

export default defineConfig({
  // The bin's `#!/usr/bin/env node` line lives in src/mcp-bin.ts; esbuild keeps it on that entry only.
  entry: [...library, "src/mcp-bin.ts"],
  format: ["esm", "cjs"],
  dts: { entry: library },
  sourcemap: true,
  clean: true,
  target: "node20",
  // Optional peers and the openai types package stay imports for the user's install to resolve.
  external: ["ai", "@modelcontextprotocol/sdk", "@mariozechner/pi-agent-core", "openai"],
  // The private helpers package is inlined: the published package never depends on it.
  noExternal: ["@remote-task/internal"],
});
