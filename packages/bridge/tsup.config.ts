import { defineConfig, type Options } from "tsup";

const common: Options = {
  dts: true,
  sourcemap: true,
  target: "node20",
  // The private helpers package is inlined: the published package never depends on it. So is
  // ipaddr.js (MIT, its licence in THIRD_PARTY_LICENSES.md): it has only a `main` field, which a
  // bundler targeting `platform: neutral` (no main fields) cannot resolve, so a bridge bundled for
  // Workers, Deno or a browser-like runtime would fail on it.
  noExternal: ["@remote-task/internal", "ipaddr.js"],
  removeNodeProtocol: false,
};

/** The library entries, ESM and CommonJS. */
const library: Options = {
  ...common,
  entry: {
    index: "src/index.ts",
    local: "src/local/index.ts",
    docker: "src/docker/index.ts",
    node: "src/node.ts",
  },
  format: ["esm", "cjs"],
  clean: true,
};

/**
 * `./testing`, ESM only: test runners load it, and vitest (which it imports) cannot be required.
 * Built after the library (`tsup --env.ENTRY testing`), so the library's clean cannot race it.
 */
const testing: Options = {
  ...common,
  entry: { testing: "src/testing/index.ts" },
  format: ["esm"],
  // Optional peers of this entry, for the user's install to resolve.
  external: ["vitest", "eventsource-parser"],
};

export default defineConfig((options) => (options.env?.ENTRY === "testing" ? testing : library));
