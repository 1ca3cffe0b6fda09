import * as protocol from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import { defaultGraceSeconds, optionsFromEnv, resolveConfig } from "../src/config.js";
import {
  type ClientOptions,
  ConfigurationError,
  clientFromEnv,
  createClient,
  formatOutput,
  formatSize,
  isConfigured,
  truncateTail,
} from "../src/index.js";

function configError(fn: () => unknown): ConfigurationError {
  try {
    fn();
  } catch (error) {
    expect(ConfigurationError.isInstance(error)).toBe(true);
    return error as ConfigurationError;
  }
  throw new Error("expected a ConfigurationError");
}

describe("the grace period", () => {
  it.each([
    [undefined, 30],
    [0.5, 10],
    [2, 10],
    [10, 10],
    [20, 20],
    [30, 30],
    [3_600, 30],
  ])(
    "defaults to the task timeout within 10..30 s (timeoutSeconds %s -> %s s)",
    (timeout, grace) => {
      const config = resolveConfig({ url: "https://b.test", timeoutSeconds: timeout });
      expect(config.graceSeconds).toBe(grace);
    },
  );

  it("is the caller's when set, zero included", () => {
    expect(resolveConfig({ url: "https://b.test", graceSeconds: 45 }).graceSeconds).toBe(45);
    expect(resolveConfig({ url: "https://b.test", graceSeconds: 0 }).graceSeconds).toBe(0);
    expect(defaultGraceSeconds(5)).toBe(10);
  });
});

describe("createClient options", () => {
  it("accepts a valid configuration", async () => {
    const client = createClient({ url: "https://bridge.example.test/base/", token: "t0k3n" });
    expect(typeof client.run).toBe("function");
    await client.close();
  });

  it.each([
    [{ url: "" }, /url is required/],
    [{ url: "not a url" }, /url is not a valid URL/],
    [{ url: "ftp://bridge.example.test" }, /http:\/\/ or https:\/\//],
    [{ url: "https://user:pw@bridge.example.test" }, /credentials/],
    [{ url: "https://bridge.example.test/?k=v" }, /query string/],
    [
      { url: "https://b.test", timeoutSeconds: 0 },
      /timeoutSeconds must be a finite number greater than 0/,
    ],
    [{ url: "https://b.test", timeoutSeconds: Number.NaN }, /timeoutSeconds/],
    [{ url: "https://b.test", graceSeconds: -1 }, /graceSeconds/],
    [{ url: "https://b.test", idleTimeoutSeconds: 0 }, /idleTimeoutSeconds/],
    [{ url: "https://b.test", idPrefix: "Bad_Prefix" }, /idPrefix is invalid/],
    [{ url: "https://b.test", idPrefix: "x".repeat(40) }, /idPrefix is invalid/],
    [{ url: "https://b.test", cwd: "relative" }, /cwd must be an absolute path/],
    [{ url: "https://b.test", token: "two words" }, /token must be a string without whitespace/],
    [
      { url: "https://b.test", maxResponseBytes: 1.5 },
      /maxResponseBytes must be an integer of at least 1/,
    ],
    [{ url: "https://b.test", maxConnections: 0 }, /maxConnections/],
    [{ url: "https://b.test", retry: { maxAttempts: 0 } }, /retry.maxAttempts/],
    [{ url: "https://b.test", retry: { maxTotalMs: -5 } }, /retry.maxTotalMs/],
    [
      { url: "https://b.test", fetch: globalThis.fetch, dispatcher: {} as never },
      /either dispatcher/,
    ],
  ])("refuses %o", (options, message) => {
    expect(configError(() => createClient(options as never)).message).toMatch(message);
  });

  it("never echoes the URL, which may carry a secret", () => {
    const error = configError(() => createClient({ url: "ftp://s3cr3t-host.example.test/path" }));
    expect(error.message).not.toContain("s3cr3t");
  });
});

describe("clientFromEnv and isConfigured", () => {
  it("reads the unprefixed variables, trimmed, and they win over MIKAN_", () => {
    const options = optionsFromEnv({
      CLOUDFLARE_SANDBOX_URL: "  https://a.example.test/ ",
      MIKAN_CLOUDFLARE_SANDBOX_URL: "https://b.example.test",
      CLOUDFLARE_SANDBOX_TOKEN: " tok-a\n",
      MIKAN_CLOUDFLARE_SANDBOX_TOKEN: "tok-b",
      MIKAN_CLOUDFLARE_SANDBOX_CWD: " /srv ",
    });
    expect(options).toMatchObject({ url: "https://a.example.test", token: "tok-a", cwd: "/srv" });
  });

  it("falls back to the MIKAN_ prefix, and treats blank values as unset", () => {
    const options = optionsFromEnv({
      CLOUDFLARE_SANDBOX_URL: "   ",
      MIKAN_CLOUDFLARE_SANDBOX_URL: "https://b.example.test",
      MIKAN_CLOUDFLARE_SANDBOX_TOKEN: "tok-b",
    });
    expect(options).toMatchObject({ url: "https://b.example.test", token: "tok-b" });
    expect(options.cwd).toBeUndefined();
  });

  it("overrides win over the environment", () => {
    const options = optionsFromEnv(
      { CLOUDFLARE_SANDBOX_URL: "https://a.example.test", CLOUDFLARE_SANDBOX_TOKEN: "env-token" },
      { token: "override", timeoutSeconds: 5 },
    );
    expect(options).toMatchObject({ token: "override", timeoutSeconds: 5 });
  });

  it("names the missing variable", () => {
    expect(configError(() => clientFromEnv({})).message).toMatch(
      /CLOUDFLARE_SANDBOX_URL is not set/,
    );
  });

  it("names the variable holding an invalid URL without echoing its value", () => {
    const error = configError(() =>
      clientFromEnv({ MIKAN_CLOUDFLARE_SANDBOX_URL: "notaurl-secretvalue" }),
    );
    expect(error.message).toMatch(/^MIKAN_CLOUDFLARE_SANDBOX_URL is not a valid URL/);
    expect(error.message).not.toContain("secretvalue");
  });

  it("refuses a relative cwd naming its variable", () => {
    const error = configError(() =>
      clientFromEnv({
        CLOUDFLARE_SANDBOX_URL: "https://a.test",
        CLOUDFLARE_SANDBOX_CWD: "tmp-xyz",
      }),
    );
    expect(error.message).toMatch(/CLOUDFLARE_SANDBOX_CWD must be an absolute path/);
    expect(error.message).not.toContain("tmp-xyz");
  });

  it("builds a working client from the environment", async () => {
    const client = clientFromEnv({ CLOUDFLARE_SANDBOX_URL: "http://127.0.0.1:9" });
    await client.close();
  });

  it("isConfigured is true only for a valid http(s) URL", () => {
    expect(isConfigured({})).toBe(false);
    expect(isConfigured({ CLOUDFLARE_SANDBOX_URL: " " })).toBe(false);
    expect(isConfigured({ CLOUDFLARE_SANDBOX_URL: "nope" })).toBe(false);
    expect(isConfigured({ CLOUDFLARE_SANDBOX_URL: "file:///etc" })).toBe(false);
    expect(isConfigured({ CLOUDFLARE_SANDBOX_URL: "https://a.test" })).toBe(true);
    expect(isConfigured({ MIKAN_CLOUDFLARE_SANDBOX_URL: "http://127.0.0.1:1" })).toBe(true);
  });
});

describe("re-exports", () => {
  it("re-exports the protocol's output helpers unchanged", () => {
    expect(formatOutput).toBe(protocol.formatOutput);
    expect(truncateTail).toBe(protocol.truncateTail);
    expect(formatSize).toBe(protocol.formatSize);
  });
});

describe("unknown options", () => {
  it("a misspelt client or retry option is a ConfigurationError naming it", () => {
    const url = "https://bridge.test";
    expect(
      configError(() => createClient({ url, timeout: 5 } as unknown as ClientOptions)).message,
    ).toMatch(/createClient has no option `timeout` \(it would be ignored\)/);
    expect(
      configError(() => createClient({ url, retry: { attempts: 2 } } as unknown as ClientOptions))
        .message,
    ).toMatch(/retry has no option `attempts`/);
    expect(
      configError(() => createClient({ url, retry: { patient: "yes" } } as never)).message,
    ).toMatch(/retry.patient must be true or false/);
  });
});
