import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bareImports, distFile, packageOf } from "./helpers/dist.js";

const OPTIONAL_PEERS = [
  "ai",
  "@modelcontextprotocol/sdk",
  "@mariozechner/pi-agent-core",
  "openai",
  "@langchain/core",
];

function packagesOf(entry: string): string[] {
  return [...new Set([...bareImports(entry)].map(packageOf))].sort();
}

/**
 * Loads a built entry in a fresh Node process whose module resolution (import and require alike)
 * refuses every optional peer, as in an install without them; prints `createRemoteTaskTool` 's
 * tool name when the entry has it.
 */
function loadWithoutPeers(entry: string): string {
  const hooks = `data:text/javascript,${encodeURIComponent(`
    import { registerHooks } from "node:module";
    const peers = ${JSON.stringify(OPTIONAL_PEERS)};
    registerHooks({
      resolve(specifier, context, next) {
        if (peers.some((p) => specifier === p || specifier.startsWith(p + "/"))) {
          throw new Error("optional peer loaded: " + specifier);
        }
        return next(specifier, context);
      },
    });`)}`;
  const file = JSON.stringify(distFile(entry));
  const script = `
    import { createRequire } from "node:module";
    const m = ${entry.endsWith(".cjs") ? `createRequire(import.meta.url)(${file})` : `await import(${file})`};
    console.log(m.createRemoteTaskTool ? m.createRemoteTaskTool({ env: {} }).name : "loaded");`;
  try {
    return execFileSync(
      process.execPath,
      ["--import", hooks, "--input-type=module", "-e", script],
      {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      },
    ).trim();
  } catch (error) {
    throw new Error(String((error as { stderr?: unknown }).stderr));
  }
}

describe("built entry points", () => {
  it("the root entry imports no optional peer (ESM and CJS)", () => {
    for (const entry of ["index.js", "index.cjs"]) {
      const packages = packagesOf(entry);
      expect(packages).toContain("@remote-task/client");
      for (const peer of OPTIONAL_PEERS) expect(packages, entry).not.toContain(peer);
    }
  });

  it("each adapter imports only its own framework", () => {
    expect(packagesOf("ai.js")).toContain("ai");
    expect(packagesOf("mcp.js")).toContain("@modelcontextprotocol/sdk");
    // pi and openai use types only: nothing of the framework is loaded at runtime.
    for (const entry of ["pi.js", "openai.js"]) {
      for (const peer of OPTIONAL_PEERS) expect(packagesOf(entry), entry).not.toContain(peer);
    }
    for (const peer of OPTIONAL_PEERS.filter((p) => p !== "ai")) {
      expect(packagesOf("ai.js")).not.toContain(peer);
    }
  });

  it("the root entry loads in a Node process where the optional peers cannot be resolved", () => {
    expect(loadWithoutPeers("index.js")).toBe("remote_task");
    expect(loadWithoutPeers("index.cjs")).toBe("remote_task");
    // The same check fails for an adapter, so it does detect a peer import.
    expect(() => loadWithoutPeers("mcp.cjs")).toThrow(
      /optional peer loaded: @modelcontextprotocol/,
    );
    expect(() => loadWithoutPeers("ai.js")).toThrow(/optional peer loaded: ai/);
    expect(() => loadWithoutPeers("mcp.js")).toThrow(/optional peer loaded: @modelcontextprotocol/);
  });

  it("no entry starts with a shebang: the package is a library", () => {
    for (const entry of ["index.js", "mcp.js", "ai.js"]) {
      expect(readFileSync(distFile(entry), "utf8").startsWith("#!")).toBe(false);
    }
  });
});
