import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, rm, writeFile } from "node:fs/promises";
import {
  createServer,
  type IncomingHttpHeaders,
  type RequestListener,
  type Server,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { type ExecResult, execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandboxCa } from "../src/host/sandbox-ca.js";
import { silentLogger } from "../src/index.js";
import { createLocalBackend, type LocalBackend } from "../src/local/index.js";
import { type EmbeddedBridge, startEmbeddedBridge } from "../src/node.js";
import { freshId, makeTmpRoot } from "./helpers.js";
import { bwrap, bwrapRequired } from "./isolation.js";

const skipBwrap = !bwrap.ok && !bwrapRequired;
const CURL = "/usr/bin/curl";

/** What a test server saw of one request. */
interface Seen {
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * A loopback HTTP server that records each request and answers `ok` (never echoing what it got,
 * so an answer cannot carry a value back); `/redirect?to=URL` answers 302 to URL.
 */
async function recordingServer(tls?: {
  key: string;
  cert: string;
}): Promise<{ server: Server; port: number; seen: Seen[] }> {
  const seen: Seen[] = [];
  const listener: RequestListener = (req, res) => {
    let body = "";
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => {
      seen.push({ url: req.url ?? "", headers: req.headers, body });
      const to = new URL(req.url ?? "/", "http://x").searchParams.get("to");
      if (req.url === "/echo-header") {
        // An upstream that echoes the credential back in a response header.
        res.writeHead(200, { "x-echo": String(req.headers.authorization) });
        res.end("ok");
        return;
      }
      if (req.url?.startsWith("/redirect") && to !== null) {
        res.writeHead(302, { location: to });
        res.end();
        return;
      }
      res.end("ok");
    });
  };
  const server = tls === undefined ? createServer(listener) : createHttpsServer(tls, listener);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port, seen };
}

/** `curl` inside the sandbox: the body, then ` status=<HTTP status> rc=<curl's exit>`. */
function curl(args: string): string {
  return `w=$(${CURL} -s --max-time 5 -o /tmp/body -w 'status=%{http_code}' ${args}); rc=$?; echo "$(cat /tmp/body 2>/dev/null) $w rc=$rc"`;
}

const GH_VALUE = `ghp_${randomBytes(18).toString("hex")}`;
const KEY_VALUE = `key-${randomBytes(18).toString("hex")}`;
const ENV_NAME = `RT_TEST_GH_TOKEN_${process.pid}`;
/** The CA of the test's HTTPS servers: the bridge trusts it upstream (egress.upstreamCa), the sandbox does not. */
const upstreamCa = createSandboxCa("upstream-test");

/* The suite's servers, backend and bridge: set up and torn down by its beforeAll and afterAll. */
let api: Awaited<ReturnType<typeof recordingServer>>;
let other: Awaited<ReturnType<typeof recordingServer>>;
let tlsApi: Awaited<ReturnType<typeof recordingServer>>;
let tlsOther: Awaited<ReturnType<typeof recordingServer>>;
/** An HTTPS server whose certificate no CA the bridge trusts signed. */
let tlsUntrusted: Awaited<ReturnType<typeof recordingServer>>;
let tmpRoot: string;
let backend: LocalBackend;
let bridge: EmbeddedBridge<LocalBackend>;
const answers: string[] = [];

async function post(body: Record<string, unknown>): Promise<Response> {
  const response = await fetch(`${bridge.url}/exec`, {
    method: "POST",
    headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
    body: JSON.stringify({ sandboxId: freshId("sec"), timeoutSeconds: 30, ...body }),
  });
  answers.push(await response.clone().text());
  return response;
}

async function run(command: string, extra: Record<string, unknown> = {}): Promise<ExecResult> {
  const response = await post({
    command,
    secrets: ["GH_TOKEN", "API_KEY"],
    network: { allow: [`127.0.0.1:${other.port}`, `127.0.0.1:${tlsOther.port}`] },
    ...extra,
  });
  const json: unknown = await response.json();
  expect(response.status, JSON.stringify(json)).toBe(200);
  return execResultSchema.parse(json);
}

const apiUrl = (path: string) => `http://localhost:${api.port}${path}`;
const otherUrl = (path: string) => `http://127.0.0.1:${other.port}${path}`;

/** The tests over plain HTTP; they run in the suite below, after its setup. */
function plainHttpTests(): void {
  it("/health lists the secrets' names and hosts, never their values or sources", async () => {
    const response = await fetch(`${bridge.url}/health`, {
      headers: { authorization: `Bearer ${bridge.token}` },
    });
    const text = await response.text();
    const health = healthResponseSchema.parse(JSON.parse(text));
    expect(health.secrets).toEqual([
      {
        name: "GH_TOKEN",
        hosts: [
          `localhost:${api.port}`,
          `localhost:${tlsApi.port}`,
          `localhost:${tlsUntrusted.port}`,
        ],
      },
      { name: "API_KEY", hosts: [`localhost:${api.port}`] },
    ]);
    expect(text).not.toContain(GH_VALUE);
    expect(text).not.toContain(ENV_NAME);
  });

  it("the command sees a per-call placeholder in env and /proc/self/environ, never the value", {
    timeout: 30_000,
  }, async () => {
    const first = await run('echo "$GH_TOKEN"; env; tr "\\0" "\\n" </proc/self/environ');
    const placeholder = first.stdout.split("\n")[0] ?? "";
    expect(placeholder).toMatch(/^rt_secret_[0-9a-f]{32}$/);
    expect(first.stdout).toContain(`API_KEY=rt_secret_`);
    expect(first.stdout).not.toContain(GH_VALUE);
    expect(first.stdout).not.toContain(KEY_VALUE);
    const second = await run('echo "$GH_TOKEN"');
    expect(second.stdout.trim()).toMatch(/^rt_secret_[0-9a-f]{32}$/);
    expect(second.stdout.trim()).not.toBe(placeholder);
  });

  it("a request to the secret's host carries the value; the named header is added", {
    timeout: 30_000,
  }, async () => {
    const result = await run(curl(`-H "Authorization: Bearer $GH_TOKEN" ${apiUrl("/user")}`));
    expect(result.stdout.trim()).toBe("ok status=200 rc=0");
    const request = api.seen.at(-1);
    expect(request?.url).toBe("/user");
    expect(request?.headers.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(request?.headers["x-api-key"]).toBe(KEY_VALUE);
  });

  it("the same placeholder to another host is refused, and that host sees nothing", {
    timeout: 30_000,
  }, async () => {
    const before = other.seen.length;
    const result = await run(curl(`-H "Authorization: Bearer $GH_TOKEN" ${otherUrl("/steal")}`));
    expect(result.stdout).toContain("status=403");
    expect(result.stdout).toMatch(
      /refused: its authorization header carries the placeholder of secret GH_TOKEN, which may go only to localhost:\d+/,
    );
    expect(other.seen.length).toBe(before);
    // Without a placeholder the call reaches it (its own allowlist), and gets no secret there.
    const plain = await run(curl(otherUrl("/plain")));
    expect(plain.stdout.trim()).toBe("ok status=200 rc=0");
    expect(other.seen.at(-1)?.headers["x-api-key"]).toBeUndefined();
  });

  it("a placeholder in a body or the URL is not substituted (headers only)", {
    timeout: 30_000,
  }, async () => {
    const result = await run(curl(`-d "t=$GH_TOKEN" "${apiUrl("/post")}?t=$GH_TOKEN"`));
    expect(result.stdout.trim()).toBe("ok status=200 rc=0");
    const request = api.seen.at(-1);
    expect(request?.body).toMatch(/^t=rt_secret_[0-9a-f]{32}$/);
    expect(request?.url).toMatch(/^\/post\?t=rt_secret_[0-9a-f]{32}$/);
  });

  it("a value an upstream echoes in a response header comes back as the placeholder", {
    timeout: 30_000,
  }, async () => {
    const result = await run(
      `${CURL} -s -D - -o /dev/null -H "Authorization: Bearer $GH_TOKEN" ${apiUrl("/echo-header")}; echo "sent $GH_TOKEN"`,
    );
    expect(api.seen.at(-1)?.headers.authorization).toBe(`Bearer ${GH_VALUE}`);
    const placeholder = /sent (rt_secret_[0-9a-f]{32})/.exec(result.stdout)?.[1];
    expect(result.stdout).toContain(`x-echo: Bearer ${placeholder}`);
    expect(result.stdout).not.toContain(GH_VALUE);
  });

  it("a redirect to another host does not carry the value", { timeout: 30_000 }, async () => {
    const before = other.seen.length;
    const to = encodeURIComponent(otherUrl("/landed"));
    // --location-trusted makes curl resend the header to the new host: the proxy refuses it.
    const result = await run(
      curl(
        `-L --location-trusted -H "Authorization: Bearer $GH_TOKEN" "${apiUrl(`/redirect?to=${to}`)}"`,
      ),
    );
    expect(result.stdout).toContain("placeholder of secret GH_TOKEN");
    expect(result.stdout).toContain("status=403");
    expect(api.seen.at(-1)?.headers.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(other.seen.length).toBe(before);
    for (const request of other.seen) {
      expect(JSON.stringify(request)).not.toContain(GH_VALUE);
      expect(JSON.stringify(request)).not.toContain(KEY_VALUE);
    }
  });

  it("a call that names no secrets gets none, and cannot reach the secrets' hosts", {
    timeout: 30_000,
  }, async () => {
    const result = await run(`echo "[$GH_TOKEN]"; ${curl(apiUrl("/none"))}`, { secrets: [] });
    expect(result.stdout).toContain("[]");
    expect(result.stdout).toMatch(
      /localhost:\d+ refused: not in the call's allowlist.* status=403/,
    );
    // With no network of its own and no secrets, the call has no network at all.
    const none = await run(curl(apiUrl("/none")), { secrets: [], network: "none" });
    expect(none.stdout).toContain("status=000");
  });

  it("the bridge's process, where the proxy holds the values, is out of the command's reach", {
    timeout: 30_000,
  }, async () => {
    // Every process the command can see, their environments and command lines, and the bridge's
    // own /proc entry (its memory, its environment with the variable the value comes from).
    const result = await run(
      [
        `[ -e /proc/${process.pid} ] && echo bridge-visible || echo bridge-invisible`,
        `head -c 64 /proc/${process.pid}/mem >/dev/null 2>&1 && echo mem-read || echo mem-refused`,
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null",
      ].join("; "),
    );
    expect(result.stdout).toMatch(/^bridge-invisible\nmem-refused\n/);
    expect(result.stdout).toContain("GH_TOKEN=rt_secret_");
    expect(result.stdout).not.toContain(GH_VALUE);
    expect(result.stdout).not.toContain(KEY_VALUE);
    expect(result.stdout).not.toContain(ENV_NAME);
  });

  it("asking for a secret the bridge does not declare is refused with the declared names", async () => {
    const response = await post({ command: "true", secrets: ["GH_TOKEN", "AWS_KEY"] });
    expect(response.status).toBe(403);
    const body = JSON.stringify(await response.json());
    expect(body).toContain('"forbidden"');
    expect(body).toContain("does not declare (AWS_KEY)");
    expect(body).toContain("it declares GH_TOKEN, API_KEY");
  });
}

/** The tests over HTTPS; they run in the suite below, after its setup. */
function httpsTests(): void {
  it("HTTPS to a secret's host: the proxy terminates TLS with the sandbox's CA and puts the value in", {
    timeout: 30_000,
  }, async () => {
    const url = `https://localhost:${tlsApi.port}/repos`;
    const result = await run(
      `${curl(`-H "Authorization: Bearer $GH_TOKEN" ${url}`)}; echo "ca=$CURL_CA_BUNDLE $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $GIT_SSL_CAINFO"; grep -c "PRIVATE KEY" "$SSL_CERT_FILE"; ls /run/remote-task`,
    );
    expect(result.stdout).toContain("ok status=200 rc=0");
    expect(tlsApi.seen.at(-1)?.url).toBe("/repos");
    expect(tlsApi.seen.at(-1)?.headers.authorization).toBe(`Bearer ${GH_VALUE}`);
    const bundle = "/run/remote-task/ca.pem";
    expect(result.stdout).toContain(`ca=${[bundle, bundle, bundle, bundle, bundle].join(" ")}`);
    // The bundle holds certificates only: the CA's key never enters the sandbox.
    expect(result.stdout).toMatch(/\n0\n/);
    expect(result.stdout).toContain("ca.pem\nnode\nproxy.sock");
  });

  it("an upstream whose certificate the bridge cannot verify gets no request: a 502 that says why", {
    timeout: 30_000,
  }, async () => {
    const result = await run(
      curl(`-H "Authorization: Bearer $GH_TOKEN" https://localhost:${tlsUntrusted.port}/x`),
    );
    expect(result.stdout).toContain("status=502");
    expect(result.stdout).toContain("the upstream TLS connection failed");
    expect(tlsUntrusted.seen).toEqual([]);
  });

  it("HTTPS to any other host stays a plain tunnel: the real server's certificate, no interception", {
    timeout: 30_000,
  }, async () => {
    const result = await run(
      `${CURL} -sk -v --max-time 5 -H "Authorization: Bearer $GH_TOKEN" https://127.0.0.1:${tlsOther.port}/x 2>&1 | grep -i "issuer:"`,
    );
    // The sandbox does not trust the test CA (hence -k); it sees that CA's certificate, not its own.
    expect(result.stdout).toContain("remote-task sandbox CA upstream-test");
    // Through a tunnel the proxy cannot read headers: the placeholder went as written, never the value.
    expect(tlsOther.seen.at(-1)?.headers.authorization).toMatch(/^Bearer rt_secret_[0-9a-f]{32}$/);
  });

  it("a sandbox without secrets gets no CA bundle and no CA variables", {
    timeout: 30_000,
  }, async () => {
    const result = await run('echo "[$SSL_CERT_FILE]"; ls /run/remote-task', { secrets: [] });
    expect(result.stdout).toBe("[]\nnode\nproxy.sock\n");
  });
}

describe.skipIf(skipBwrap)("secrets under bwrap, over plain HTTP", () => {
  beforeAll(async () => {
    expect(existsSync(CURL), `${CURL} is needed inside the sandbox`).toBe(true);
    api = await recordingServer();
    other = await recordingServer();
    tlsApi = await recordingServer(upstreamCa.leaf("localhost"));
    tlsOther = await recordingServer(upstreamCa.leaf("127.0.0.1"));
    tlsUntrusted = await recordingServer(createSandboxCa("untrusted").leaf("localhost"));
    tmpRoot = await makeTmpRoot("rt-sec-");
    const keyFile = join(tmpRoot, "..", `rt-sec-key-${process.pid}`);
    await writeFile(keyFile, `${KEY_VALUE}\n`, { mode: 0o600 });
    process.env[ENV_NAME] = GH_VALUE;
    backend = createLocalBackend({
      isolation: "bwrap",
      killGraceMs: 300,
      tmpRoot,
      egress: {
        allowPrivate: ["localhost", "127.0.0.1"],
        upstreamCa: upstreamCa.certificatePem,
      },
    });
    bridge = await startEmbeddedBridge({
      backend,
      logger: silentLogger,
      // The call may reach the other server itself; only the secrets' hosts come with secrets.
      network: {
        default: "none",
        ceiling: { allow: [`127.0.0.1:${other.port}`, `127.0.0.1:${tlsOther.port}`] },
      },
      secrets: {
        GH_TOKEN: {
          from: { env: ENV_NAME },
          hosts: [
            `localhost:${api.port}`,
            `localhost:${tlsApi.port}`,
            `localhost:${tlsUntrusted.port}`,
          ],
        },
        API_KEY: { from: { file: keyFile }, hosts: [`localhost:${api.port}`], header: "X-Api-Key" },
      },
    });
  });

  afterAll(async () => {
    await bridge?.close();
    await backend?.close();
    for (const server of [api, other, tlsApi, tlsOther, tlsUntrusted]) server?.server.close();
    delete process.env[ENV_NAME];
    if (tmpRoot !== undefined) {
      expect(await readdir(tmpRoot)).toEqual([]);
      await rm(tmpRoot, { recursive: true, force: true });
      await rm(join(tmpRoot, "..", `rt-sec-key-${process.pid}`), { force: true });
    }
    // No answer of the whole suite carried a value.
    for (const answer of answers) {
      expect(answer).not.toContain(GH_VALUE);
      expect(answer).not.toContain(KEY_VALUE);
    }
  });

  plainHttpTests();
  httpsTests();
});
