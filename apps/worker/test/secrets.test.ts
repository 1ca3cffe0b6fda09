/**
 * A call's secrets through the Worker's fetch handler and the real `TaskContainer` on a fake
 * container: the command's env holds only a placeholder, the container's egress gate (the real
 * `EgressGate` code, its upstream a stand-in that echoes what arrived: TestEgressGate) puts the
 * value into request headers to the secret's hosts only, refuses a placeholder headed elsewhere,
 * and hides an echoed value in response headers; the value is in no answer, log line or storage.
 */
import { execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import type { WorkerEnv } from "../src/config.js";
import { type EgressAnswer, fakeCommand } from "./fake-container.js";
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

const VALUE = `ghp_${crypto.randomUUID().replaceAll("-", "")}`;
const NPM_VALUE = `npm_${crypto.randomUUID().replaceAll("-", "")}`;
const PLACEHOLDER = /^rt_secret_[0-9a-f]{32}$/;

/** The Worker's bindings with SECRETS declared and their values as Worker secrets. */
function secretsEnv(): WorkerEnv {
  return {
    ...workerEnv({
      SECRETS: JSON.stringify({
        GH_TOKEN: { hosts: ["api.github.com"], header: "Authorization: Bearer {value}" },
        NPM_TOKEN: { hosts: ["registry.npmjs.org:443"], from: { env: "NPM_BINDING" } },
      }),
    }),
    GH_TOKEN: VALUE,
    NPM_BINDING: NPM_VALUE,
  } as WorkerEnv;
}

type EgressInit = { method?: string; headers?: Record<string, string>; body?: string };

/** What the stand-in upstream received (TestEgressGate). */
interface Echo {
  method: string;
  url: string;
  redirect: string;
  headers: Record<string, string>;
  body: string;
}

function echo(answer: EgressAnswer): Echo {
  expect(answer.status, answer.text).toBe(200);
  return JSON.parse(answer.text) as Echo;
}

/**
 * Runs a hanging command asking for `secrets` under `network`, hands the test its container and
 * the placeholders its env got, then cancels the call.
 */
async function withCall(
  body: { secrets: string[]; network?: unknown },
  test: (call: {
    id: string;
    fetch: (url: string, init?: EgressInit) => Promise<EgressAnswer>;
    env: Record<string, string>;
  }) => Promise<void>,
): Promise<void> {
  const id = sandboxId();
  const env = secretsEnv();
  const { handler } = loggingWorker();
  const running = exec(
    { sandboxId: id, command: fakeCommand({ hang: true }), ...body },
    {
      handler,
      env,
    },
  );
  await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
  const container = fakeNamespace().get(fakeNamespace().idFromName(id));
  const commandEnv = (await sandboxState(id)).execs[0]?.env ?? {};
  try {
    await test({ id, fetch: (url, init) => container.egressFetch(url, init), env: commandEnv });
  } finally {
    await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      handler,
      env,
    });
    await running;
  }
}

describe("a call's secrets on the Worker", () => {
  it("/health lists their names and hosts, never a value or a binding", async () => {
    const health = healthResponseSchema.parse(
      JSON.parse((await send("/health", { headers: AUTH, env: secretsEnv() })).text),
    );
    expect(health.secrets).toEqual([
      { name: "GH_TOKEN", hosts: ["api.github.com"] },
      { name: "NPM_TOKEN", hosts: ["registry.npmjs.org:443"] },
    ]);
    expect(JSON.stringify(health)).not.toContain("NPM_BINDING");
  });

  it("give the command a placeholder, and the gate the value for the secret's hosts (over https; plain http refused)", async () => {
    await withCall({ secrets: ["GH_TOKEN"] }, async ({ id, fetch, env }) => {
      const placeholder = env.GH_TOKEN as string;
      expect(placeholder).toMatch(PLACEHOLDER);
      expect(Object.values(env)).not.toContain(VALUE);
      // The internet stays off; the secret's host became the call's allowlist.
      const state = await sandboxState(id);
      expect(state.starts).toMatchObject([{ enableInternet: false }]);
      expect(state.intercepts).toEqual(["all-http", "https *"]);
      for (const scheme of ["https"]) {
        const got = echo(
          await fetch(`${scheme}://api.github.com/repos?q=${placeholder}`, {
            method: "POST",
            headers: { "x-api-key": `key ${placeholder}`, accept: "application/json" },
            body: `token=${placeholder}`,
          }),
        );
        // The placeholder in a header becomes the value; the declared header is set.
        expect(got.headers["x-api-key"]).toBe(`key ${VALUE}`);
        expect(got.headers.authorization).toBe(`Bearer ${VALUE}`);
        expect(got.headers.accept).toBe("application/json");
        // The URL and the body go as written; a redirect is left to the command.
        expect(got.url).toBe(`${scheme}://api.github.com/repos?q=${placeholder}`);
        expect(got.body).toBe(`token=${placeholder}`);
        expect(got.redirect).toBe("manual");
      }
      // A bare host in the declaration: never over plain HTTP, where the value would be readable.
      const clear = await fetch(`http://api.github.com/repos`, {
        headers: { "x-api-key": `key ${placeholder}` },
      });
      expect(clear.status).toBe(403);
      expect(clear.text).toContain("over HTTPS only");
      expect(clear.text).not.toContain(VALUE);
    });
  });

  it("refuse a placeholder headed to another host the call may reach, and send nothing there", async () => {
    await withCall(
      {
        secrets: ["GH_TOKEN", "NPM_TOKEN"],
        network: { allow: ["pypi.org", "registry.npmjs.org"] },
      },
      async ({ fetch, env }) => {
        const refused = await fetch("https://pypi.org/simple/", {
          headers: { authorization: `Bearer ${env.GH_TOKEN}` },
        });
        expect(refused.status).toBe(403);
        expect(refused.text).toContain("carries the placeholder of secret GH_TOKEN");
        expect(refused.text).toContain("api.github.com");
        expect(refused.text).not.toContain(VALUE);
        // A secret bound to port 443 is refused on port 80 of its own host (which the call's
        // own allowlist lets it reach).
        const port80 = await fetch("http://registry.npmjs.org/", {
          headers: { authorization: `Bearer ${env.NPM_TOKEN}` },
        });
        expect(port80.status).toBe(403);
        expect(port80.text).toContain("secret NPM_TOKEN");
        // Without a placeholder the request goes, and no declared header is added.
        const plain = echo(await fetch("https://pypi.org/simple/"));
        expect(plain.headers.authorization).toBeUndefined();
        const npm = echo(
          await fetch("https://registry.npmjs.org/-/whoami", {
            headers: { authorization: `Bearer ${env.NPM_TOKEN}` },
          }),
        );
        expect(npm.headers.authorization).toBe(`Bearer ${NPM_VALUE}`);
      },
    );
  });

  it("hide a value an upstream echoes in a response header behind the placeholder", async () => {
    await withCall({ secrets: ["GH_TOKEN"] }, async ({ fetch, env }) => {
      const answer = await fetch("https://api.github.com/user", {
        headers: { "x-api-key": env.GH_TOKEN as string },
      });
      expect(answer.status).toBe(200);
      expect(answer.headers["x-echo-key"]).toBe(env.GH_TOKEN);
      expect(answer.headers["x-echo-auth"]).toBe(`Bearer ${env.GH_TOKEN}`);
      expect(JSON.stringify(answer.headers)).not.toContain(VALUE);
    });
  });

  it("under open: the container has the internet and the gate still swaps and refuses", async () => {
    await withCall({ secrets: ["GH_TOKEN"], network: "open" }, async ({ id, fetch, env }) => {
      const state = await sandboxState(id);
      expect(state.starts).toMatchObject([{ enableInternet: true }]);
      expect(state.intercepts).toEqual(["all-http", "https *"]);
      // The interception's CA is trusted, as under an allowlist.
      expect(state.execs[0]?.envNames).toContain("SSL_CERT_FILE");
      expect(echo(await fetch("https://example.com/")).url).toBe("https://example.com/");
      const refused = await fetch("https://example.com/", {
        headers: { authorization: `Bearer ${env.GH_TOKEN}` },
      });
      expect(refused.status).toBe(403);
      const swapped = echo(await fetch("https://api.github.com/user"));
      expect(swapped.headers.authorization).toBe(`Bearer ${VALUE}`);
    });
  });

  it("keep the value out of the answer, the log lines and the container object's storage", async () => {
    const id = sandboxId();
    const { handler, entries } = loggingWorker();
    const answer = await exec(
      { sandboxId: id, command: "echo $GH_TOKEN", secrets: ["GH_TOKEN"] },
      { handler, env: secretsEnv() },
    );
    expect(execResultSchema.parse(JSON.parse(answer.text)).code).toBe(0);
    expect(answer.text).not.toContain(VALUE);
    expect(JSON.stringify(entries)).not.toContain(VALUE);
    const stored = await fakeNamespace().get(fakeNamespace().idFromName(id)).storedText();
    expect(stored).toContain("rt_secret_");
    expect(stored).not.toContain(VALUE);
  });

  it("show the placeholder where the command printed the value (as an upstream's echo would make it)", async () => {
    const answer = await exec(
      { sandboxId: sandboxId(), command: `echo ${VALUE}`, secrets: ["GH_TOKEN"] },
      { handler: loggingWorker().handler, env: secretsEnv() },
    );
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result.stdout.trim()).toMatch(PLACEHOLDER);
    expect(answer.text).not.toContain(VALUE);
  });

  it("reach a durable call's container through its keeper, which reads the same bindings", async () => {
    const id = sandboxId();
    const env = { ...secretsEnv(), DURABLE_CALLS: "true" } as WorkerEnv;
    const answer = await exec({ sandboxId: id, command: "true", secrets: ["GH_TOKEN"] }, { env });
    expect(answer.status, answer.text).toBe(200);
    const state = await sandboxState(id);
    expect(state.execs[0]?.env.GH_TOKEN).toMatch(PLACEHOLDER);
    expect(state.intercepts).toEqual(["all-http", "https *"]);
  });

  it("answer 503 naming the secret when its binding is missing, and start nothing", async () => {
    const id = sandboxId();
    const env = { ...secretsEnv(), GH_TOKEN: undefined } as unknown as WorkerEnv;
    const answer = await exec({ sandboxId: id, command: "true", secrets: ["GH_TOKEN"] }, { env });
    expect(answer.status).toBe(503);
    expect(answer.text).toContain("secret GH_TOKEN");
    expect((await sandboxState(id)).starts).toEqual([]);
  });
});
