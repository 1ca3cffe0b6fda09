/**
 * Secrets over HTTPS on the docker backend, on a real engine: the call's egress proxy terminates
 * TLS for a secret's hosts with the call's own CA, and the container trusts that CA through a
 * bundle its script writes (the image's system bundle and the CA's certificate) and the usual
 * variables. The test image's curl (OpenSSL) verifies certificates; the HTTPS servers' CA is
 * trusted by the bridge upstream (egress.upstreamCa), never by the container.
 */

import { randomBytes } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { createServer as createHttpsServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { type ExecResult, execResultSchema } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBridge } from "../src/bridge.js";
import { CONTAINER_CA_BUNDLE } from "../src/docker/container.js";
import { createDockerBackend, type DockerBackend } from "../src/docker/index.js";
import { createSandboxCa } from "../src/host/sandbox-ca.js";
import { silentLogger } from "../src/logger.js";
import { noEngineReason, requireEngine, skipDocker } from "./docker-engine.js";

const TOKEN = "docker-secrets-token";
const VALUE = `ghp_${randomBytes(18).toString("hex")}`;
const ENV_NAME = `RT_DOCKER_HTTPS_SECRET_${process.pid}`;
/** The CA of the test's HTTPS servers: trusted by the bridge upstream, not by the container. */
const upstreamCa = createSandboxCa("upstream-test");
let counter = 0;

/** An HTTPS server on loopback that records the authorization header of each request. */
async function recordingServer(tls: { key: string; cert: string }) {
  const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  const server: Server = createHttpsServer(tls, (req, res) => {
    seen.push({ url: req.url ?? "", headers: req.headers });
    res.end("ok");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port, seen };
}

/** `curl` in the container (verifying TLS): the body, then ` status=<HTTP status> rc=<exit>`. */
function curl(args: string): string {
  return `w=$(curl -s --max-time 10 -o /tmp/body -w 'status=%{http_code}' ${args}); rc=$?; echo "$(cat /tmp/body 2>/dev/null) $w rc=$rc"`;
}

let api: Awaited<ReturnType<typeof recordingServer>>;
let other: Awaited<ReturnType<typeof recordingServer>>;
let untrusted: Awaited<ReturnType<typeof recordingServer>>;
let backend: DockerBackend;
let bridge: ReturnType<typeof createBridge>;
const answers: string[] = [];

async function run(command: string, extra: Record<string, unknown> = {}): Promise<ExecResult> {
  const response = await bridge(
    new Request("http://bridge.test/exec", {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({
        sandboxId: `docker-sec-${process.pid}-${counter++}`,
        command,
        secrets: ["GH_TOKEN"],
        network: { allow: [`127.0.0.1:${other.port}`] },
        timeoutSeconds: 60,
        ...extra,
      }),
    }),
  );
  const text = await response.text();
  answers.push(text);
  expect(response.status, text).toBe(200);
  return execResultSchema.parse(JSON.parse(text));
}

function httpsTests(): void {
  it("HTTPS to a secret's host: curl verifies the proxy's certificate by the call's CA, the value goes in", async () => {
    const result = await run(
      [
        curl(`-H "Authorization: Bearer $GH_TOKEN" https://localhost:${api.port}/repos`),
        'echo "ca=$SSL_CERT_FILE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $GIT_SSL_CAINFO"',
        'grep -c "PRIVATE KEY" "$SSL_CERT_FILE"',
        'grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE" /etc/ssl/certs/ca-certificates.crt',
      ].join("; "),
    );
    const lines = result.stdout.split("\n");
    expect(lines[0]).toBe("ok status=200 rc=0");
    expect(api.seen.at(-1)?.url).toBe("/repos");
    expect(api.seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);
    expect(lines[1]).toBe(`ca=${Array(5).fill(CONTAINER_CA_BUNDLE).join(" ")}`);
    // Certificates only: the CA's key never enters the container.
    expect(lines[2]).toBe("0");
    // The image's system bundle and the call's CA: other HTTPS hosts keep the image's roots.
    const [bundle, system] = [lines[3], lines[4]].map((line) => Number(line?.split(":")[1]));
    expect(system).toBeGreaterThan(10);
    expect(bundle).toBe((system ?? 0) + 1);
  });

  it("the call's CA vouches for the secret's hosts only: any other HTTPS host is a plain tunnel", async () => {
    const result = await run(
      [
        curl(`-H "Authorization: Bearer $GH_TOKEN" https://127.0.0.1:${other.port}/x`),
        `curl -sk -v --max-time 10 https://127.0.0.1:${other.port}/y 2>&1 | grep -i "issuer:"`,
      ].join("; "),
    );
    // Through a tunnel the container meets the real server, whose CA it does not trust (60).
    expect(result.stdout).toContain("status=000 rc=60");
    expect(result.stdout).toContain("remote-task sandbox CA upstream-test");
    for (const request of other.seen) expect(request.headers.authorization).toBeUndefined();
  });

  it("an upstream the bridge cannot verify gets no request: a 502 that says why", async () => {
    const result = await run(
      curl(`-H "Authorization: Bearer $GH_TOKEN" https://localhost:${untrusted.port}/x`),
    );
    expect(result.stdout).toContain("status=502");
    expect(result.stdout).toContain("the upstream TLS connection failed");
    expect(untrusted.seen).toEqual([]);
  });

  it("a call without secrets gets no CA bundle and no CA variables", async () => {
    const result = await run(`echo "[$SSL_CERT_FILE]"; ls ${CONTAINER_CA_BUNDLE} 2>&1 | wc -l`, {
      secrets: [],
    });
    expect(result.stdout).toBe("[]\n1\n");
    const listed = await run(`ls -a /tmp`, { secrets: [] });
    expect(listed.stdout).not.toContain("remote-task-ca");
  });
}

if (skipDocker) it.skip(`docker secrets (SKIPPED: ${noEngineReason})`, () => {});
else
  describe("docker backend secrets over HTTPS", () => {
    beforeAll(async () => {
      api = await recordingServer(upstreamCa.leaf("localhost"));
      other = await recordingServer(upstreamCa.leaf("127.0.0.1"));
      untrusted = await recordingServer(createSandboxCa("untrusted").leaf("localhost"));
      process.env[ENV_NAME] = VALUE;
      const { host, image, ulimits } = requireEngine();
      backend = createDockerBackend({
        image,
        engine: host,
        ulimits,
        pool: 0,
        egress: {
          allowPrivate: ["localhost", "127.0.0.1"],
          upstreamCa: upstreamCa.certificatePem,
        },
        logger: silentLogger,
      });
      await backend.ready;
      bridge = createBridge({
        backend,
        token: TOKEN,
        logger: silentLogger,
        network: { ceiling: { allow: [`127.0.0.1:${other.port}`] } },
        secrets: {
          GH_TOKEN: {
            from: { env: ENV_NAME },
            hosts: [`localhost:${api.port}`, `localhost:${untrusted.port}`],
          },
        },
      });
    }, 60_000);

    afterAll(async () => {
      await bridge?.shutdown();
      await backend?.close();
      for (const server of [api, other, untrusted]) server?.server.close();
      delete process.env[ENV_NAME];
      for (const answer of answers) expect(answer).not.toContain(VALUE);
    });

    httpsTests();
  });
