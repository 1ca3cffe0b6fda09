import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { applySecrets, createBridge, hideSecrets } from "../src/index.js";
import { type CallSecret, resolveSecrets, withSecretHosts } from "../src/secrets.js";
import { createFakeBackend } from "../src/testing/index.js";
import { memoryLogger, request, TOKEN, trackBridge } from "./helpers.js";

const VALUE = `v-${randomBytes(12).toString("hex")}`;
const VAR = `RT_SECRETS_UNIT_${process.pid}`;
const proxyBackend = {
  name: "p",
  injectsSecrets: true,
  networkModes: ["none", "allow", "open"] as const,
};

afterEach(() => {
  delete process.env[VAR];
});

describe("the deployer's secrets", () => {
  it("are refused with a backend that cannot inject them, or when malformed", () => {
    const ok = { from: { env: "X" }, hosts: ["api.github.com"] };
    expect(() =>
      resolveSecrets({ A: ok }, { name: "fake", networkModes: ["none", "allow"] }),
    ).toThrow("The fake backend cannot inject secrets here");
    expect(() => resolveSecrets({ "A-B": ok }, proxyBackend)).toThrow("is not a secret name");
    expect(() => resolveSecrets({ A: { ...ok, hosts: [] } }, proxyBackend)).toThrow(
      "must list at least one host pattern",
    );
    expect(() => resolveSecrets({ A: { ...ok, hosts: ["https://x"] } }, proxyBackend)).toThrow(
      "is not a host pattern",
    );
    expect(() =>
      resolveSecrets({ A: { ...ok, header: "Authorization: Bearer" } }, proxyBackend),
    ).toThrow("{value}");
    expect(() =>
      resolveSecrets({ A: { hosts: ["a.b"], from: {} as never } }, proxyBackend),
    ).toThrow("from must be");
    // A file needs a host that reads files (the Node host gives its reader).
    expect(() => resolveSecrets({ A: { ...ok, from: { file: "/k" } } }, proxyBackend)).toThrow(
      "needs a host that reads files",
    );
    expect(resolveSecrets({ A: { ...ok, from: { file: "/k" } } }, proxyBackend, true)).toHaveLength(
      1,
    );
  });

  it("widen a call's policy by their hosts: none to an allowlist, an allowlist gains them, open stays", () => {
    const declared = resolveSecrets(
      { A: { from: { env: "X" }, hosts: ["a.example", "*.b.example:443"] } },
      proxyBackend,
    );
    expect(withSecretHosts("none", declared, ["A"])).toEqual({
      allow: ["a.example", "*.b.example:443"],
    });
    expect(withSecretHosts(undefined, declared, ["A"])).toEqual({
      allow: ["a.example", "*.b.example:443"],
    });
    expect(withSecretHosts({ allow: ["pypi.org", "a.example"] }, declared, ["A"])).toEqual({
      allow: ["pypi.org", "a.example", "*.b.example:443"],
    });
    expect(withSecretHosts("open", declared, ["A"])).toBe("open");
    expect(withSecretHosts("none", declared, [])).toBe("none");
  });
});

describe("a call's secrets in request headers", () => {
  const secret: CallSecret = {
    name: "GH_TOKEN",
    placeholder: "rt_secret_0123",
    value: VALUE,
    patterns: resolveSecrets(
      { G: { from: { env: "X" }, hosts: ["api.test:443"] } },
      proxyBackend,
    )[0]?.patterns as CallSecret["patterns"],
    header: { name: "x-extra", template: "K {value}" },
  };

  it("put the value in every header carrying the placeholder, and the declared header, for its host", () => {
    const verdict = applySecrets(
      { authorization: "Bearer rt_secret_0123", "x-two": ["rt_secret_0123", "a"], accept: "*/*" },
      { host: "api.test", port: 443, tls: true },
      [secret],
    );
    expect(verdict).toEqual({
      ok: true,
      headers: {
        authorization: `Bearer ${VALUE}`,
        "x-two": [VALUE, "a"],
        accept: "*/*",
        "x-extra": `K ${VALUE}`,
      },
    });
  });

  it("refuse the placeholder to another host or port, and add nothing there", () => {
    for (const [host, port] of [
      ["evil.test", 443],
      ["api.test", 80],
    ] as const) {
      const refused = applySecrets({ cookie: "s=rt_secret_0123" }, { host, port, tls: true }, [
        secret,
      ]);
      expect(refused.ok).toBe(false);
      expect(JSON.stringify(refused)).not.toContain(VALUE);
      const plain = applySecrets({ accept: "*/*" }, { host, port, tls: true }, [secret]);
      expect(plain).toEqual({ ok: true, headers: { accept: "*/*" } });
    }
  });

  it("send a value over plain HTTP only where a pattern of the secret names the port", () => {
    const [bare, ported] = resolveSecrets(
      {
        G: { from: { env: "X" }, hosts: ["api.test"] },
        L: { from: { env: "X" }, hosts: ["local.test:8080"], header: "X-Key" },
      },
      proxyBackend,
    ).map((declared) => ({
      name: declared.name,
      placeholder: `rt_secret_${declared.name}`,
      value: VALUE,
      patterns: declared.patterns,
      header: declared.header,
    }));
    const carrying = { authorization: "Bearer rt_secret_G" };
    // A bare host: HTTPS on any port, never plain HTTP (the value would cross the network readable).
    expect(
      applySecrets(carrying, { host: "api.test", port: 443, tls: true }, [bare as CallSecret]).ok,
    ).toBe(true);
    const clear = applySecrets(carrying, { host: "api.test", port: 80, tls: false }, [
      bare as CallSecret,
    ]);
    expect(clear.ok).toBe(false);
    expect(JSON.stringify(clear)).toContain("over HTTPS only (this request is plain HTTP");
    expect(JSON.stringify(clear)).not.toContain(VALUE);
    // A pattern that names the port: the deployer allows plain HTTP there.
    expect(
      applySecrets({}, { host: "local.test", port: 8080, tls: false }, [ported as CallSecret]),
    ).toEqual({ ok: true, headers: { "x-key": VALUE } });
    expect(
      applySecrets({}, { host: "api.test", port: 80, tls: false }, [bare as CallSecret]),
    ).toEqual({
      ok: true,
      headers: {},
    });
  });
});

describe("a call's secrets in response headers", () => {
  it("put an echoed value back as the placeholder, in single and repeated headers", () => {
    const secret = {
      name: "A",
      placeholder: "rt_secret_77",
      value: VALUE,
      patterns: [],
      header: undefined,
    } satisfies CallSecret;
    expect(
      hideSecrets({ "x-echo": `got ${VALUE}`, "set-cookie": [`a=${VALUE}`, "b=1"] }, [secret]),
    ).toEqual({ "x-echo": "got rt_secret_77", "set-cookie": ["a=rt_secret_77", "b=1"] });
  });
});

describe("the bridge and a call's secrets", () => {
  it("gives the backend placeholders in env and the values apart, and redacts values in its logs", async () => {
    process.env[VAR] = VALUE;
    const fake = createFakeBackend({ networkModes: ["none", "allow", "open"] });
    const backend = Object.assign(Object.create(fake), {
      injectsSecrets: true,
      start(spec: Parameters<typeof fake.start>[0]) {
        fake.starts.push(spec);
        throw new Error(`upstream said ${spec.secrets?.[0]?.value}`);
      },
    });
    const logger = memoryLogger();
    const bridge = createBridge({
      backend,
      token: TOKEN,
      logger,
      secrets: { GH_TOKEN: { from: { env: VAR }, hosts: ["api.github.com"] } },
    });
    trackBridge(bridge);
    const response = await bridge(
      request("/exec", {
        method: "POST",
        body: { sandboxId: "s1", command: "true", secrets: ["GH_TOKEN"] },
      }),
    );
    const answer = await response.text();
    const spec = fake.starts[0];
    expect(spec?.env.GH_TOKEN).toMatch(/^rt_secret_[0-9a-f]{32}$/);
    expect(spec?.secrets?.[0]?.value).toBe(VALUE);
    expect(spec?.network).toEqual({ allow: ["api.github.com"] });
    expect(answer).not.toContain(VALUE);
    const logs = JSON.stringify(logger.entries);
    expect(logs).toContain("upstream said [redacted]");
    expect(logs).not.toContain(VALUE);
  });

  it("answers 503 not_configured, naming the secret, when its value cannot be read", async () => {
    const backend = Object.assign(
      Object.create(createFakeBackend({ networkModes: ["none", "allow"] })),
      { injectsSecrets: true },
    );
    const bridge = createBridge({
      backend,
      token: TOKEN,
      // The variable is unset.
      secrets: { GH_TOKEN: { from: { env: `${VAR}_UNSET` }, hosts: ["api.github.com"] } },
    });
    trackBridge(bridge);
    const response = await bridge(
      request("/exec", {
        method: "POST",
        body: { sandboxId: "s2", command: "true", secrets: ["GH_TOKEN"] },
      }),
    );
    expect(response.status).toBe(503);
    expect(await response.text()).toContain("cannot read the value of secret GH_TOKEN");
  });
});
