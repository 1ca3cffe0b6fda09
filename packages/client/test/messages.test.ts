import { BackendError, createBridge } from "@remote-task/bridge";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { BRIDGE_TEXTS, CLOUDFLARE_TEXTS } from "@remote-task/internal";
import { afterEach, describe, expect, it } from "vitest";
import { clientFromEnv, createClient } from "../src/client.js";
import { AuthenticationError, BridgeError } from "../src/errors.js";
import { failure } from "./helpers/assertions.js";

const BRIDGE_TOKEN = "the-bridge-token";
const URL_BASE = "https://bridge.test";
const handlers: Array<ReturnType<typeof createBridge>> = [];
afterEach(async () => {
  for (const bridge of handlers.splice(0)) await bridge.shutdown();
});

/** A Fetch function answered by a real bridge in this process (fake backend). */
function bridgeFetch(startError?: unknown): typeof globalThis.fetch {
  const backend = createFakeBackend(
    startError === undefined ? {} : { script: () => ({ startError }) },
  );
  const bridge = createBridge({ backend, token: BRIDGE_TOKEN, logger: () => {} });
  handlers.push(bridge);
  return (async (input: RequestInfo | URL, init?: RequestInit) =>
    bridge(new Request(input, init))) as typeof globalThis.fetch;
}

describe("authentication errors", () => {
  it("keep the bridge's own text, even when the token is a word of it, and name the option", async () => {
    const client = createClient({ url: URL_BASE, token: "wrong", fetch: bridgeFetch() });
    const error = await failure(client.run("true"));
    expect(AuthenticationError.isInstance(error)).toBe(true);
    expect(error.message).toContain(BRIDGE_TEXTS.unauthorized.replace(/\.$/, ""));
    expect(error.message).not.toContain("[redacted]");
    expect(error.message).not.toContain("..");
    expect(error.message).toContain("given by the `token` option");
    expect(error.message).not.toContain("CLOUDFLARE_SANDBOX_TOKEN");
  });

  it.each([
    [{ CLOUDFLARE_SANDBOX_TOKEN: "nope-1" }, {}, "given by CLOUDFLARE_SANDBOX_TOKEN"],
    [{ MIKAN_CLOUDFLARE_SANDBOX_TOKEN: "nope-2" }, {}, "given by MIKAN_CLOUDFLARE_SANDBOX_TOKEN"],
    [{ CLOUDFLARE_SANDBOX_TOKEN: "nope-3" }, { token: "nope-4" }, "given by the `token` option"],
    [{}, { token: "nope-5", tokenSource: "--token" }, "given by --token"],
    [{}, {}, "sent none"],
  ])("name where the token came from (%o, %o)", async (env, overrides, named) => {
    const client = clientFromEnv(
      { CLOUDFLARE_SANDBOX_URL: URL_BASE, ...env },
      { ...overrides, fetch: bridgeFetch() },
    );
    const error = await failure(client.health());
    expect(AuthenticationError.isInstance(error)).toBe(true);
    expect(error.message).toContain(named);
    expect(error.message).not.toContain("..");
    expect(error.message).not.toContain("[redacted]");
  });

  it("without a token say so and where to set one", async () => {
    const fromEnv = clientFromEnv({ CLOUDFLARE_SANDBOX_URL: URL_BASE }, { fetch: bridgeFetch() });
    expect((await failure(fromEnv.health())).message).toMatch(
      /sent none .*with CLOUDFLARE_SANDBOX_TOKEN\.$/,
    );
    const direct = createClient({ url: URL_BASE, fetch: bridgeFetch() });
    expect((await failure(direct.health())).message).toMatch(
      /sent none .*with the `token` option\.$/,
    );
  });
});

describe("a backend's own message", () => {
  it("reaches the caller as written, even when the token is a word of it", async () => {
    // The worker README's example token is `dev`, a word of the containers message.
    const fetch = bridgeFetch(
      new BackendError("sandbox_error", CLOUDFLARE_TEXTS.containersDisabled),
    );
    const client = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch });
    const dev = createClient({ url: URL_BASE, token: "dev", fetch });
    const error = await failure(client.run("true", { env: { MODE: "dev" } }));
    expect(BridgeError.isInstance(error)).toBe(true);
    expect(error.message).toContain(CLOUDFLARE_TEXTS.containersDisabled.replace(/\.$/, ""));
    expect(error.message).toContain("`wrangler dev`");
    // With the token `dev` the bridge refuses the token, and its own text stays whole too.
    expect((await failure(dev.health())).message).toContain("wrong bearer token");
  });

  it("one story on whether the command ran: a backend that says it did not run is believed", async () => {
    const notRun = bridgeFetch(
      new BackendError("sandbox_error", CLOUDFLARE_TEXTS.containersDisabled),
    );
    const client = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch: notRun });
    const error = await failure(client.run("true"));
    expect(error.message).toContain("so the command did not run");
    expect(error.message).not.toMatch(/may (or may not )?have run/);
    expect(error.mayHaveRun).toBe(false);
    const unknown = bridgeFetch(
      new BackendError("sandbox_error", CLOUDFLARE_TEXTS.failed("E_X", "lost")),
    );
    const other = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch: unknown });
    const lost = await failure(other.run("true"));
    expect(lost.message).toContain("The command may or may not have run; it was not retried.");
    expect(lost.mayHaveRun).toBe(true);
  });

  it("still has a secret redacted where it is not part of the project's text", async () => {
    const fetch = bridgeFetch(
      new BackendError(
        "sandbox_error",
        CLOUDFLARE_TEXTS.failed("E_X", "value dev-secret-9 refused"),
      ),
    );
    const client = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch });
    const error = await failure(client.run("true", { env: { K: "dev-secret-9" } }));
    expect(error.message).toContain("The sandbox failed (E_X): value [redacted] refused");
    expect(error.message).not.toContain("dev-secret-9");
  });
});

describe("invalid request errors", () => {
  it("say an issue once when the bridge's own words already say it", async () => {
    const said = "cwd must be an absolute path inside /workspace.";
    const fetch = (async () =>
      Response.json(
        { error: said, code: "invalid_request", issues: [{ path: ["cwd"], message: said }] },
        { status: 400 },
      )) as typeof globalThis.fetch;
    const client = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch, retry: false });
    const error = await failure(client.run("true"));
    expect(error.message.split("cwd must be an absolute path").length).toBe(2);
  });

  it("still list issues the bridge's words do not say", async () => {
    const fetch = (async () =>
      Response.json(
        {
          error: "Invalid exec request.",
          code: "invalid_request",
          issues: [{ path: ["timeoutSeconds"], message: "must be at most 3600" }],
        },
        { status: 400 },
      )) as typeof globalThis.fetch;
    const client = createClient({ url: URL_BASE, token: BRIDGE_TOKEN, fetch, retry: false });
    const error = await failure(client.run("true"));
    expect(error.message).toContain("timeoutSeconds: must be at most 3600");
  });
});
