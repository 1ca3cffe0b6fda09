import { healthResponseSchema, type NetworkPolicy } from "@remote-task/protocol";
import { afterEach, describe, expect, it } from "vitest";
import {
  createBridge,
  DEFAULT_LIMITS,
  hostMatches,
  isPublicAddress,
  networkAllows,
  parseHostPattern,
} from "../src/index.js";
import { createFakeBackend } from "../src/testing/index.js";
import { expectError, request, setupBridge, shutdownBridges, TOKEN } from "./helpers.js";

afterEach(shutdownBridges);

const enforcing = { networkModes: ["none", "allow", "open"] as const };

describe("host patterns", () => {
  it.each([
    ["pypi.org", "pypi.org", 443, true],
    ["pypi.org", "PyPI.org.", 80, true],
    ["pypi.org", "files.pypi.org", 443, false],
    ["*.pythonhosted.org", "files.pythonhosted.org", 443, true],
    ["*.pythonhosted.org", "pythonhosted.org", 443, false],
    ["*.pythonhosted.org", "evilpythonhosted.org", 443, false],
    ["example.com:8080", "example.com", 8080, true],
    ["example.com:8080", "example.com", 80, false],
    ["10.0.0.7:3141", "10.0.0.7", 3141, true],
    ["[::1]:9000", "::1", 9000, true],
    ["[::1]:9000", "0:0:0:0:0:0:0:1", 9000, true],
    ["127.0.0.1", "localhost", 80, false],
  ] as const)("%s matches %s:%d: %s", (pattern, host, port, expected) => {
    expect(hostMatches(parseHostPattern(pattern), host, port)).toBe(expected);
  });

  it.each([
    ["8.8.8.8", true],
    ["2606:4700:4700::1111", true],
    ["127.0.0.1", false],
    ["10.1.2.3", false],
    ["172.16.0.1", false],
    ["192.168.1.1", false],
    ["169.254.169.254", false],
    ["100.64.0.1", false],
    ["0.0.0.0", false],
    ["::1", false],
    ["fd00::1", false],
    ["fe80::1", false],
    ["::ffff:127.0.0.1", false],
    ["::ffff:8.8.8.8", true],
    ["not an address", false],
  ] as const)("%s is public: %s", (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected);
  });
});

describe("networkAllows: none < allowlist within the ceiling < open", () => {
  const list = (...allow: string[]): NetworkPolicy => ({ allow });
  it.each([
    ["none", "none", true],
    ["none", "open", false],
    ["none", list("pypi.org"), false],
    [list("pypi.org"), "none", true],
    [list("pypi.org"), list("pypi.org"), true],
    [list("pypi.org"), list("pypi.org:443"), true],
    [list("pypi.org:443"), list("pypi.org"), false],
    [list("*.example.com"), list("a.example.com", "*.b.example.com"), true],
    [list("*.example.com"), list("example.com"), false],
    [list("pypi.org"), list("pypi.org", "evil.test"), false],
    [list("pypi.org"), "open", false],
    [list("10.0.0.7:3141"), list("10.0.0.7:3141"), true],
    ["open", list("pypi.org", "*.example.com:443"), true],
    ["open", "open", true],
    // Only a deployer may name a private address, by listing it in the ceiling.
    ["open", list("127.0.0.1:8787"), false],
    ["open", list("169.254.169.254"), false],
    ["open", list("[::1]"), false],
  ] as const)("ceiling %j allows %j: %s", (ceiling, requested, expected) => {
    expect(networkAllows(ceiling, requested)).toBe(expected);
  });
});

describe("a bridge over a backend that enforces network policies", () => {
  it("runs a call that names no policy with the default, and reports default and ceiling", async () => {
    const { bridge, backend, exec } = setupBridge(
      { network: { default: "none", ceiling: { allow: ["pypi.org", "*.pythonhosted.org"] } } },
      enforcing,
    );
    expect((await exec({ command: "true" })).status).toBe(200);
    expect(backend.starts[0]?.network).toBe("none");
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(health.network).toEqual({
      default: "none",
      ceiling: { allow: ["pypi.org", "*.pythonhosted.org"] },
    });
  });

  it("runs a call with the policy it asks for within the ceiling, exactly", async () => {
    const { backend, exec } = setupBridge(
      { network: { ceiling: { allow: ["pypi.org", "*.pythonhosted.org"] } } },
      enforcing,
    );
    const allow = { allow: ["files.pythonhosted.org:443"] };
    expect((await exec({ command: "true", network: allow })).status).toBe(200);
    expect(backend.starts[0]?.network).toEqual(allow);
  });

  it("refuses more than the ceiling with 403 forbidden, naming both, and runs nothing", async () => {
    const { backend, exec } = setupBridge(
      { network: { ceiling: { allow: ["pypi.org"] } } },
      enforcing,
    );
    const open = await expectError(await exec({ command: "true", network: "open" }), "forbidden");
    expect(open.error).toContain("network open");
    expect(open.error).toContain("allow pypi.org");
    const wider = await exec({ command: "true", network: { allow: ["pypi.org", "evil.test"] } });
    expect((await expectError(wider, "forbidden")).error).toContain("evil.test");
    expect(backend.starts).toEqual([]);
  });

  it("tells the backend whose literals an allowlist holds: the caller's under an open ceiling only", async () => {
    const open = setupBridge({ network: { ceiling: "open" } }, enforcing);
    const allow = { allow: ["203.0.114.9:22"] };
    expect((await open.exec({ command: "true", network: allow })).status).toBe(200);
    expect(open.backend.starts[0]).toMatchObject({ network: allow, callersAllowlist: true });
    const listed = setupBridge(
      { network: { ceiling: { allow: ["203.0.114.9:22"] }, default: allow } },
      enforcing,
    );
    expect((await listed.exec({ command: "true", network: allow })).status).toBe(200);
    expect((await listed.exec({ command: "true" })).status).toBe(200);
    expect(listed.backend.starts.map((spec) => spec.callersAllowlist)).toEqual([false, false]);
  });

  it("under an open ceiling still refuses a caller's private address (the bridge's own host)", async () => {
    const { backend, exec } = setupBridge({ network: { ceiling: "open" } }, enforcing);
    const response = await exec({ command: "true", network: { allow: ["127.0.0.1:8787"] } });
    await expectError(response, "forbidden");
    expect((await exec({ command: "true", network: "open" })).status).toBe(200);
    expect(backend.starts.map((spec) => spec.network)).toEqual(["open"]);
  });

  it("refuses a mode the backend cannot enforce even within the ceiling", async () => {
    const { exec } = setupBridge(
      { network: { ceiling: "open" } },
      { networkModes: ["none", "open"] },
    );
    const response = await exec({ command: "true", network: { allow: ["pypi.org"] } });
    expect((await expectError(response, "forbidden")).error).toContain("cannot enforce");
  });

  it("refuses a deployer setting the backend cannot enforce, or a default above the ceiling", () => {
    const make = (network: object, networkModes?: readonly ("none" | "allow" | "open")[]) => () =>
      createBridge({
        backend: createFakeBackend(networkModes === undefined ? {} : { networkModes }),
        token: TOKEN,
        network,
      });
    expect(make({ default: "open", ceiling: "none" }, enforcing.networkModes)).toThrow(
      /wider than network.ceiling/,
    );
    expect(make({ ceiling: "open" }, ["none"])).toThrow(/cannot enforce/);
    expect(make({ ceiling: { allow: ["https://x"] } }, enforcing.networkModes)).toThrow(
      /network.ceiling must be/,
    );
    expect(make({ ceiling: "open" })).toThrow(/does not control network access/);
  });
});

describe("a bridge over a backend that controls no network access", () => {
  it("omits network from /health, passes none to the backend, and refuses network with 403", async () => {
    const { bridge, backend, exec } = setupBridge();
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(health.network).toBeUndefined();
    expect((await exec({ command: "true" })).status).toBe(200);
    expect(backend.starts[0]?.network).toBeUndefined();
    const refused = await exec({ command: "true", network: "none" });
    expect((await expectError(refused, "forbidden")).error).toMatch(/does not control network/);
    expect(backend.starts).toHaveLength(1);
  });
});

describe("stdin", () => {
  it("hands the backend the bytes of text or base64 stdin, and nothing for empty stdin", async () => {
    const { backend, exec } = setupBridge();
    await exec({ command: "true", stdin: "héllo" });
    await exec({ command: "true", stdin: { base64: "AP8Q" } });
    await exec({ command: "true", stdin: "" });
    await exec({ command: "true" });
    expect(backend.starts.map((spec) => spec.stdin && [...spec.stdin])).toEqual([
      [0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f],
      [0x00, 0xff, 0x10],
      undefined,
      undefined,
    ]);
  });

  it("refuses more than maxStdinBytes with 413 naming the sizes, and runs nothing", async () => {
    const { bridge, backend, exec } = setupBridge({ limits: { maxStdinBytes: 1000 } });
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(health.limits?.maxStdinBytes).toBe(1000);
    expect((await exec({ command: "true", stdin: "x".repeat(1000) })).status).toBe(200);
    const refused = await exec({ command: "true", stdin: { base64: btoa("y".repeat(1001)) } });
    expect((await expectError(refused, "payload_too_large")).error).toContain(
      "stdin is 1001 bytes; this bridge takes at most 1000",
    );
    expect(backend.starts).toHaveLength(1);
  });

  it("takes 1 MiB of binary stdin (base64) within the default request limit", async () => {
    const { backend, exec } = setupBridge();
    const maxStdinBytes = DEFAULT_LIMITS.maxStdinBytes ?? 0;
    expect(maxStdinBytes).toBe(1_048_576);
    const bytes = new Uint8Array(maxStdinBytes).map((_, i) => (i * 7919) % 256);
    let binary = "";
    for (const byte of bytes) binary += String.fromCharCode(byte);
    const response = await exec({ command: "true", stdin: { base64: btoa(binary) } });
    expect(response.status).toBe(200);
    expect(backend.starts[0]?.stdin).toEqual(bytes);
  });
});
