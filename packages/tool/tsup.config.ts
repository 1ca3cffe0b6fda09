import { defineConfig, type Options } from "tsup";

// Optional peers and the openai types package stay imports for the user's install to resolve.
const peers = [
  "ai",
  "@modelcontextprotocol/sdk",
  "@mariozechner/pi-agent-core",
  "openai",
  "@openai/agents",
  "@langchain/core",
];

const common: Options = {
  sourcemap: true,
  target: "node20",
  external: peers,
  // The private helpers package is inlined: the published package never depends on it.
  noExternal: ["@remote-task/internal"],
};

/** The package's entries: the root and one per framework adapter. */
const ENTRIES = [
  "src/index.ts",
  "src/ai.ts",
  "src/mcp.ts",
  "src/pi.ts",
  "src/openai.ts",
  "src/openai-agents.ts",
  "src/claude.ts",
  "src/mastra.ts",
  "src/langchain.ts",
];

/**
 * Every entry as ESM, in one build so the adapters share the root entry's chunks (one
 * `RemoteTaskToolError` class, one copy of the tool).
 */
const esm: Options = {
  ...common,
  entry: ENTRIES,
  format: ["esm"],
  dts: true,
  clean: true,
};

/**
 * The CommonJS entries, built after the ESM ones (`tsup --env.ENTRY cjs`), so the ESM build's
 * clean cannot race them. `ai` and pi-agent-core are ESM only: `./ai` requires `ai` through
 * Node.js's `require()` of ES modules (the package needs Node.js 22.19, where it is on), `./pi`
 * imports only its types; both declare those types with `resolution-mode: "import"`, which a
 * CommonJS consumer's TypeScript accepts (a plain import of them fails there with TS1479).
 */
const cjs: Options = {
  ...common,
  entry: ENTRIES,
  format: ["cjs"],
  dts: true,
};

export default defineConfig((options) => (options.env?.ENTRY === "cjs" ? cjs : esm));
