import { afterEach, describe, expect, it } from "vitest";
import { ConfigurationError, createClient } from "../src/index.js";
import { isOlderVersion, MIN_NODE_VERSION, unsupportedNodeReason } from "../src/node-version.js";

describe("the Node.js version check", () => {
  it("compares versions part by part", () => {
    expect(isOlderVersion("20.20.2", "22.19.0")).toBe(true);
    expect(isOlderVersion("v22.18.9", "22.19.0")).toBe(true);
    expect(isOlderVersion("22.19.0", "22.19.0")).toBe(false);
    expect(isOlderVersion("22.20.0", "22.19.0")).toBe(false);
    expect(isOlderVersion("24.0.0", "22.19.0")).toBe(false);
    expect(isOlderVersion("100.0.0", "22.19.0")).toBe(false);
  });

  it("names the required version and this one", () => {
    expect(unsupportedNodeReason("20.20.2")).toBe(
      `@remote-task/client needs Node.js >= ${MIN_NODE_VERSION} for its HTTP client (undici); this is Node.js 20.20.2. Upgrade Node.js, or pass a Fetch API implementation as the \`fetch\` option.`,
    );
    expect(unsupportedNodeReason("24.21.0")).toBeUndefined();
    expect(unsupportedNodeReason(process.versions.node)).toBeUndefined();
  });

  it("matches the package's engines field", async () => {
    const pkg = await import("../package.json", { with: { type: "json" } });
    expect(pkg.default.engines.node).toBe(`>=${MIN_NODE_VERSION}`);
  });
});

describe("createClient on an older Node.js", () => {
  const versions = process.versions;
  afterEach(() => {
    Object.defineProperty(process, "versions", { value: versions, configurable: true });
  });
  const pretend = (node: string) =>
    Object.defineProperty(process, "versions", {
      value: { ...versions, node },
      configurable: true,
    });

  it("fails fast with a ConfigurationError naming the required version", () => {
    pretend("20.20.2");
    let error: unknown;
    try {
      createClient({ url: "http://127.0.0.1:1" });
    } catch (e) {
      error = e;
    }
    expect(ConfigurationError.isInstance(error)).toBe(true);
    expect((error as Error).message).toContain(`needs Node.js >= ${MIN_NODE_VERSION}`);
  });

  it("works with an injected fetch, which needs no undici", async () => {
    pretend("20.20.2");
    const client = createClient({ url: "http://127.0.0.1:1", fetch: globalThis.fetch });
    await client.close();
  });
});
