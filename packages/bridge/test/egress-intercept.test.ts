/**
 * The egress proxy's TLS interception for a secret's host, driven directly (no sandbox): a client
 * CONNECTs through the proxy's socket, trusts the proxy's CA (`caCertificate`) and sends its
 * requests on one connection; the proxy puts the value in and reuses its upstream TLS connection.
 */
import { rm } from "node:fs/promises";
import { request } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EgressProxy, startEgressProxy } from "../src/host/egress.js";
import { createSandboxCa } from "../src/host/sandbox-ca.js";
import { parseHostPattern } from "../src/index.js";
import type { CallSecret } from "../src/secrets.js";
import { makeTmpRoot } from "./helpers.js";

const VALUE = "intercept-test-value-0123456789";
const PLACEHOLDER = "rt_secret_0123456789abcdef0123456789abcdef";
const upstreamCa = createSandboxCa("upstream-test");

let dir: string;
let server: Server;
let port: number;
/** TLS handshakes the server completed, and the authorization header of each request. */
let handshakes = 0;
const authorizations: string[] = [];

beforeAll(async () => {
  dir = await makeTmpRoot("rt-intercept-");
  server = createServer(upstreamCa.leaf("localhost"), (req, res) => {
    authorizations.push(String(req.headers.authorization));
    res.end("ok");
  });
  server.on("secureConnection", () => handshakes++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.close();
  await rm(dir, { recursive: true, force: true });
});

async function interceptingProxy(): Promise<EgressProxy & { socketPath: string }> {
  const socketPath = join(dir, `p${Math.random().toString(36).slice(2)}.sock`);
  const secret: CallSecret = {
    name: "GH_TOKEN",
    placeholder: PLACEHOLDER,
    value: VALUE,
    patterns: [parseHostPattern(`localhost:${port}`)],
    header: undefined,
  };
  const proxy = await startEgressProxy({
    socketPath,
    policy: { allow: [`localhost:${port}`] },
    allowPrivate: [parseHostPattern("localhost")],
    protectedEndpoints: () => [],
    secrets: [secret],
    upstreamCa: upstreamCa.certificatePem,
  });
  return Object.assign(proxy, { socketPath });
}

/** A TLS connection to `localhost:port` through the proxy, trusting only the proxy's CA. */
function tunnel(proxy: EgressProxy & { socketPath: string }): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const req = request({
      socketPath: proxy.socketPath,
      method: "CONNECT",
      path: `localhost:${port}`,
    });
    req.once("connect", (response, socket: Socket) => {
      if (response.statusCode !== 200) return reject(new Error(`CONNECT ${response.statusCode}`));
      const tls = tlsConnect({ socket, servername: "localhost", ca: proxy.caCertificate });
      tls.once("secureConnect", () => resolve(tls));
      tls.once("error", reject);
    });
    req.once("error", reject);
    req.end();
  });
}

/** Sends `count` requests one after another on `socket`; resolves when all `ok`s arrived. */
async function requestsOn(socket: Socket, count: number): Promise<void> {
  let received = "";
  socket.on("data", (chunk) => {
    received += chunk;
  });
  for (let i = 0; i < count; i++) {
    socket.write(
      `GET /${i} HTTP/1.1\r\nHost: localhost:${port}\r\nAuthorization: Bearer ${PLACEHOLDER}\r\n\r\n`,
    );
    while ((received.match(/\r\n\r\nok/g) ?? []).length <= i) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

describe("an intercepted connection to a secret's host", () => {
  it("puts the value into each request and keeps one upstream TLS connection for them all", async () => {
    const proxy = await interceptingProxy();
    try {
      expect(proxy.caCertificate).toMatch(/^-----BEGIN CERTIFICATE-----/);
      const before = { handshakes, requests: authorizations.length };
      const socket = await tunnel(proxy);
      await requestsOn(socket, 5);
      socket.destroy();
      expect(authorizations.slice(before.requests)).toEqual(Array(5).fill(`Bearer ${VALUE}`));
      expect(handshakes - before.handshakes).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it("closes its pooled upstream connection with the proxy", async () => {
    const proxy = await interceptingProxy();
    const socket = await tunnel(proxy);
    await requestsOn(socket, 1);
    const open = () =>
      new Promise<number>((resolve) => server.getConnections((_error, n) => resolve(n)));
    expect(await open()).toBeGreaterThan(0);
    await proxy.close();
    // The server sees the close shortly after: waited for, within the test's timeout.
    while ((await open()) > 0) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await open()).toBe(0);
  }, 30_000);
});
