/**
 * The network policy and stdin of a call, through the Worker's fetch handler and the real
 * `TaskContainer` on a fake container: what the Worker reports, what it refuses before any
 * container starts, what each call's container is asked for, and what its egress gate lets out.
 */
import { errorBodySchema, execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import { fakeCommand } from "./fake-container.js";
import {
  AUTH,
  exec,
  fakeNamespace,
  loggingWorker,
  sandboxId,
  sandboxState,
  send,
  workerEnv,
} from "./helpers.js";

/** What wrangler.jsonc ships: no network unless a call asks for open. */
const openCeiling = workerEnv();
/** No variables: the ceiling is the default, none. */
const noNetwork = workerEnv({ NETWORK_DEFAULT: undefined, NETWORK_CEILING: undefined });

async function health(env: ReturnType<typeof workerEnv>) {
  return healthResponseSchema.parse(
    JSON.parse((await send("/health", { headers: AUTH, env })).text),
  );
}

describe("network policy through the Worker", () => {
  it("/health reports the default and the ceiling: wrangler.jsonc's none and open, none and none without the variables", async () => {
    expect((await health(openCeiling)).network).toEqual({ default: "none", ceiling: "open" });
    expect((await health(noNetwork)).network).toEqual({ default: "none", ceiling: "none" });
    const open = workerEnv({ NETWORK_DEFAULT: "open" });
    expect((await health(open)).network).toEqual({ default: "open", ceiling: "open" });
  });

  it("runs a call with no network in a container without the internet, and open with it", async () => {
    const quiet = sandboxId();
    expect((await exec({ sandboxId: quiet, command: "echo a" }, { env: openCeiling })).status).toBe(
      200,
    );
    expect((await sandboxState(quiet)).starts).toMatchObject([{ enableInternet: false }]);
    const open = sandboxId();
    const answer = await exec(
      { sandboxId: open, command: "echo b", network: "open" },
      { env: openCeiling },
    );
    expect(execResultSchema.parse(JSON.parse(answer.text)).stdout).toBe("b\n");
    expect((await sandboxState(open)).starts).toMatchObject([{ enableInternet: true }]);
  });

  it("answers 403 for open beyond a ceiling of none, and starts nothing", async () => {
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: "echo x", network: "open" },
      { env: noNetwork },
    );
    expect(answer.status).toBe(403);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("forbidden");
    expect(body.error).toContain("more than this bridge allows (none)");
    expect((await sandboxState(id)).starts).toEqual([]);
  });

  it("runs an allowlisted call with the internet off and HTTP and HTTPS through its gate", async () => {
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: "echo x", network: { allow: ["pypi.org", "*.github.com:443"] } },
      { env: openCeiling },
    );
    expect(answer.status).toBe(200);
    const state = await sandboxState(id);
    expect(state.starts).toMatchObject([{ enableInternet: false }]);
    expect(state.intercepts).toEqual(["all-http", "https *"]);
  });

  it("the gate refuses what the allowlist does not name, private addresses and other ports", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const env = workerEnv({ NETWORK_CEILING: "open" });
    const running = exec(
      {
        sandboxId: id,
        command: fakeCommand({ hang: true }),
        network: { allow: ["pypi.org", "*.github.com:443"] },
      },
      { handler, env },
    );
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
    const container = fakeNamespace().get(fakeNamespace().idFromName(id));
    for (const url of [
      "http://example.com/",
      "https://api.github.com:8443/",
      "http://api.github.com/",
      "http://169.254.169.254/latest/meta-data/",
      "http://10.0.0.1/",
      "http://[::1]/",
    ]) {
      const refused = await container.egressFetch(url);
      expect(refused.status, url).toBe(403);
      expect(refused.text, url).toContain("remote-task egress: request refused");
    }
    await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      handler,
      env,
    });
    await running;
  });

  it("answers 403 for an allowlist beyond the deployer's allowlist ceiling, and starts nothing", async () => {
    const env = workerEnv({ NETWORK_CEILING: "pypi.org,*.pythonhosted.org" });
    expect((await health(env)).network).toEqual({
      default: "none",
      ceiling: { allow: ["pypi.org", "*.pythonhosted.org"] },
    });
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: "echo x", network: { allow: ["example.com"] } },
      { env },
    );
    expect(answer.status).toBe(403);
    expect((await sandboxState(id)).starts).toEqual([]);
    const within = sandboxId();
    const ok = await exec(
      { sandboxId: within, command: "echo y", network: { allow: ["files.pythonhosted.org"] } },
      { env },
    );
    expect(ok.status).toBe(200);
  });

  it("answers 403 for an allowlist naming a private address unless the deployer's ceiling names it", async () => {
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: "echo x", network: { allow: ["10.0.0.5"] } },
      { env: openCeiling },
    );
    expect(answer.status).toBe(403);
    expect((await sandboxState(id)).starts).toEqual([]);
  });
});

describe("stdin through the Worker", () => {
  it("delivers text and base64 stdin to the command", async () => {
    for (const stdin of ["line one\nline two\n", { base64: btoa("from base64\n") }]) {
      const id = sandboxId();
      const answer = await exec({ sandboxId: id, command: "cat", stdin });
      const expected = typeof stdin === "string" ? stdin : "from base64\n";
      expect(execResultSchema.parse(JSON.parse(answer.text)).stdout).toBe(expected);
      expect((await sandboxState(id)).execs[0]?.stdin).toHaveLength(
        new TextEncoder().encode(expected).byteLength,
      );
    }
  });

  it("reports the stdin limit and answers 413 above it, before any container starts", async () => {
    const env = workerEnv({ MAX_STDIN_BYTES: "8" });
    expect((await health(env)).limits?.maxStdinBytes).toBe(8);
    const id = sandboxId();
    const answer = await exec({ sandboxId: id, command: "cat", stdin: "123456789" }, { env });
    expect(answer.status).toBe(413);
    expect(errorBodySchema.parse(JSON.parse(answer.text))).toMatchObject({
      code: "payload_too_large",
      error: expect.stringContaining("stdin is 9 bytes; this bridge takes at most 8"),
    });
    expect((await sandboxState(id)).starts).toEqual([]);
    const fits = await exec({ sandboxId: sandboxId(), command: "cat", stdin: "12345678" }, { env });
    expect(execResultSchema.parse(JSON.parse(fits.text)).stdout).toBe("12345678");
  });
});
