import { defineConfig } from "tsup";

export default defineConfig({
  entry: ["src/bin.ts", "src/mcp-bin.ts"],
  format: ["esm"],
  sourcemap: true,
  clean: true,
  target: "node22",
  // The private helpers package is inlined: the published package never depends on it.
  noExternal: ["@remote-task/internal"],
});
