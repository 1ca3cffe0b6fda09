import { defineConfig } from "tsup";

export default defineConfig({
  entry: {
    index: "src/index.ts",
    local: "src/local/index.ts",
    node: "src/node.ts",
    testing: "src/testing/index.ts",
  },
  format: ["esm", "cjs"],
  dts: true,
  sourcemap: true,
  clean: true,
  target: "node20",
  external: ["vitest"],
  // The private helpers package is inlined: the published package never depends on it.
  noExternal: ["@remote-task/internal"],
  removeNodeProtocol: false,
});
