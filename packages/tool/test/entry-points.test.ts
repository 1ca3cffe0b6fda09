import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bareImports, distFile, packageOf } from "./helpers/dist.js";

const OPTIONAL_PEERS = ["ai", "@modelcontextprotocol/sdk", "@mariozechner/pi-agent-core", "openai"];

function packagesOf(entry: string): string[] {
  return [...new Set([...bareImports(entry)].map(packageOf))].sort();
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
    // A loader hook makes every optional peer unresolvable, as in an install without them.
    const hook = `data:text/javascript,${encodeURIComponent(`
      const peers = ${JSON.stringify(OPTIONAL_PEERS)};
      export async function resolve(specifier, context, next) {
        if (peers.some((p) => specifier === p || specifier.startsWith(p + "/"))) {
          throw new Error("optional peer loaded: " + specifier);
        }
        return next(specifier, context);
      }`)}`;
    const register = `data:text/javascript,${encodeURIComponent(
      `import { register } from "node:module"; register(${JSON.stringify(hook)});`,
    )}`;
    const script = `
      const esm = await import(${JSON.stringify(distFile("index.js"))});
      const { createRequire } = await import("node:module");
      const cjs = createRequire(import.meta.url)(${JSON.stringify(distFile("index.cjs"))});
      const tools = [esm, cjs].map((m) => m.createRemoteTaskTool({ env: {} }).name);
      console.log(JSON.stringify(tools));`;
    const out = execFileSync(
      process.execPath,
      ["--import", register, "--input-type=module", "-e", script],
      {
        encoding: "utf8",
      },
    );
    expect(JSON.parse(out)).toEqual(["remote_task", "remote_task"]);
  });

  it("only the MCP bin starts with a node shebang", () => {
    expect(readFileSync(distFile("mcp-bin.js"), "utf8").startsWith("#!/usr/bin/env node\n")).toBe(
      true,
    );
    for (const entry of ["index.js", "mcp.js", "ai.js"]) {
      expect(readFileSync(distFile(entry), "utf8").startsWith("#!")).toBe(false);
    }
  });
});
