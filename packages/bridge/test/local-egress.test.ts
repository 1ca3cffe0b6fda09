import { spawn } from "node:child_process";
import { createSocket } from "node:dgram";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { createServer as createHttpServer, request } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EgressProxy, startEgressProxy } from "../src/host/egress.js";
import { RELAY_MAX_CONNECTIONS, relayArgs } from "../src/host/relay.js";
import { parseHostPattern } from "../src/index.js";
import { makeTmpRoot } from "./helpers.js";

/** A loopback TCP server that counts connections and answers `pong` to anything. */
let target: { server: Server; port: number; connections: number };
let dir: string;

beforeAll(async () => {
  dir = await makeTmpRoot("rt-egress-");
  const server = createServer((socket) => {
    target.connections++;
    socket.on("data", () => socket.end("pong"));
  });
  await new Promise<void>((resolve) => server.listen(0, "::", resolve));
  target = { server, port: (server.address() as { port: number }).port, connections: 0 };
});

afterAll(async () => {
  target.server.close();
  await rm(dir, { recursive: true, force: true });
});

let sockets = 0;
async function proxy(
  policy: Parameters<typeof startEgressProxy>[0]["policy"],
  allowPrivate: string[] = [],
  bridgePort?: number,
  extra: Pick<
    Parameters<typeof startEgressProxy>[0],
    "limits" | "resolver" | "callersAllowlist"
  > = {},
): Promise<EgressProxy & { socketPath: string }> {
  const socketPath = join(dir, `p${++sockets}.sock`);
  const started = await startEgressProxy({
    ...extra,
    socketPath,
    policy,
    allowPrivate: allowPrivate.map(parseHostPattern),
    protectedEndpoints: () =>
      bridgePort === undefined ? [] : [{ host: "0.0.0.0", port: bridgePort }],
  });
  return Object.assign(started, { socketPath });
}

/** Sends `CONNECT authority` through the proxy; resolves with the status and what followed. */
function connectThrough(
  socketPath: string,
  authority: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: "CONNECT", path: authority });
    req.once("connect", (response, socket: Socket, head: Buffer) => {
      // What arrived with the answer's head (a refusal's body) is in `head`.
      let body = head.toString();
      if (response.statusCode === 200) socket.end("ping");
      socket.on("data", (chunk) => {
        body += chunk;
      });
      socket.on("close", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    req.once("error", reject);
    req.end();
  });
}

function getThrough(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: "GET", path }, (response) => {
      let body = "";
      response.on("data", (chunk) => {
        body += chunk;
      });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    req.once("error", reject);
    req.end();
  });
}

describe("the egress proxy refuses what is not public before connecting", () => {
  it("loopback in every spelling, private, carrier-grade NAT, unique-local, link-local and unspecified addresses, under open", {
    timeout: 20_000,
  }, async () => {
    const open = await proxy("open");
    const before = target.connections;
    const port = target.port;
    for (const authority of [
      `127.0.0.1:${port}`,
      `127.1.2.3:${port}`,
      `[::1]:${port}`,
      `[::ffff:127.0.0.1]:${port}`,
      `0.0.0.0:${port}`,
      `[::]:${port}`,
      `localhost:${port}`,
      "10.1.2.3:80",
      "172.16.0.1:80",
      "192.168.1.1:80",
      "100.64.0.1:80",
      "169.254.169.254:80",
      "[fe80::1]:80",
      "[fd00::1]:80",
    ]) {
      const answer = await connectThrough(open.socketPath, authority);
      expect(answer.status, authority).toBe(403);
      expect(answer.body, authority).toMatch(
        /is not public \(\w[\w -]*\) and the deployer has not allowed it \(network policy: open\)/,
      );
    }
    expect(target.connections).toBe(before);
    expect(open.refused).toBe(14);
    await open.close();
    expect(existsSync(open.socketPath)).toBe(false);
  });

  it("an IP-literal pattern of the allowlist or allowPrivate lets a private address through", {
    timeout: 20_000,
  }, async () => {
    const listed = await proxy({ allow: [`127.0.0.1:${target.port}`] });
    expect(await connectThrough(listed.socketPath, `127.0.0.1:${target.port}`)).toEqual({
      status: 200,
      body: "pong",
    });
    // The same address under another name is not what the pattern names.
    expect((await connectThrough(listed.socketPath, `localhost:${target.port}`)).status).toBe(403);
    await listed.close();

    // The same literal in a caller's own allowlist (under an open ceiling) is no permission.
    const callers = await proxy({ allow: [`127.0.0.1:${target.port}`] }, [], undefined, {
      callersAllowlist: true,
    });
    const refused = await connectThrough(callers.socketPath, `127.0.0.1:${target.port}`);
    expect(refused.status).toBe(403);
    expect(refused.body).toContain("127.0.0.1 is not public (loopback)");
    await callers.close();

    const deployer = await proxy("open", ["localhost"]);
    expect(await connectThrough(deployer.socketPath, `localhost:${target.port}`)).toEqual({
      status: 200,
      body: "pong",
    });
    expect((await connectThrough(deployer.socketPath, `127.0.0.1:${target.port}`)).status).toBe(
      403,
    );
    await deployer.close();
  });

  it("the bridge's own port is refused on every local address, even where private hosts are allowed", {
    timeout: 20_000,
  }, async () => {
    const guarded = await proxy("open", ["127.0.0.1", "[::1]", "localhost"], target.port);
    const before = target.connections;
    for (const authority of [
      `127.0.0.1:${target.port}`,
      `[::1]:${target.port}`,
      `localhost:${target.port}`,
    ]) {
      const answer = await connectThrough(guarded.socketPath, authority);
      expect(answer.status, authority).toBe(403);
      expect(answer.body).toMatch(/is the bridge itself/);
    }
    expect(target.connections).toBe(before);
    await guarded.close();
  });

  it("answers a request that is not for a proxy with 400, and a refused plain request with 403", {
    timeout: 20_000,
  }, async () => {
    const open = await proxy({ allow: ["example.test"] });
    const relative = await getThrough(open.socketPath, "/index.html");
    expect(relative.status).toBe(400);
    expect(relative.body).toMatch(/absolute-URI/);
    const refused = await getThrough(open.socketPath, `http://127.0.0.1:${target.port}/`);
    expect(refused).toEqual({
      status: 403,
      body: `remote-task egress proxy: connection to 127.0.0.1:${target.port} refused: not in the call's allowlist (network policy: allow example.test).\n`,
    });
    await open.close();
  });

  it("a destination that does not answer is a 502 naming it", { timeout: 20_000 }, async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer();
      probe.listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => resolve(port));
      });
    });
    const open = await proxy("open", ["127.0.0.1"]);
    const answer = await connectThrough(open.socketPath, `127.0.0.1:${closedPort}`);
    expect(answer).toEqual({
      status: 502,
      body: `remote-task egress proxy: cannot connect to 127.0.0.1 port ${closedPort}: ECONNREFUSED.\n`,
    });
    expect(open.refused).toBe(0);
    await open.close();
  });

  it("close() ends tunnels that are still open", { timeout: 20_000 }, async () => {
    const open = await proxy("open", ["127.0.0.1"]);
    const closed = new Promise<void>((resolve, reject) => {
      const req = request({
        socketPath: open.socketPath,
        method: "CONNECT",
        path: `127.0.0.1:${target.port}`,
      });
      req.once("connect", (response, socket: Socket) => {
        expect(response.statusCode).toBe(200);
        socket.on("error", () => {});
        socket.on("close", () => resolve());
        void open.close();
      });
      req.once("error", reject);
      req.end();
    });
    await closed;
  });
});

/** Resolves once `socket` closes; the ms it took. */
function closedWithin(socket: Socket): Promise<number> {
  const start = Date.now();
  return new Promise((resolve) => {
    socket.on("error", () => {});
    socket.resume(); // what the proxy says before it closes is read, so the end is seen
    socket.once("close", () => resolve(Date.now() - start));
  });
}

describe("what a sandbox can make its proxy hold is bounded", () => {
  it("closes connections beyond maxConnections as they arrive; a slot freed serves again", {
    timeout: 20_000,
  }, async () => {
    const bounded = await proxy("open", ["127.0.0.1"], undefined, {
      limits: { maxConnections: 3 },
    });
    const held = await Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<Socket>((resolve) => {
            const socket = connect(bounded.socketPath, () => resolve(socket));
          }),
      ),
    );
    const extra = connect(bounded.socketPath);
    // Closed by the proxy: a connection it held would stay open past this test's timeout.
    await closedWithin(extra);
    expect(held.every((socket) => !socket.destroyed)).toBe(true);
    const freed = closedWithin(held[0] as Socket);
    held[0]?.destroy();
    await freed;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await connectThrough(bounded.socketPath, `127.0.0.1:${target.port}`)).toEqual({
      status: 200,
      body: "pong",
    });
    for (const socket of held) socket.destroy();
    await bounded.close();
  });

  it("takes a connection's pipelined requests one at a time, and closes one that sends too many ahead", {
    timeout: 20_000,
  }, async () => {
    // A plain HTTP destination that answers each request after 50 ms, counting connections.
    let open = 0;
    let most = 0;
    let total = 0;
    const web = createHttpServer((_req, res) => {
      setTimeout(() => res.end("ok"), 50);
    });
    web.on("connection", (socket: Socket) => {
      total++;
      most = Math.max(most, ++open);
      socket.once("close", () => open--);
    });
    await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
    const port = (web.address() as { port: number }).port;
    const bounded = await proxy("open", ["127.0.0.1"]);
    const pipeline = (count: number) =>
      new Promise<{ answers: number; closed: boolean }>((resolve) => {
        const socket = connect(bounded.socketPath, () => {
          let text = "";
          for (let i = 0; i < count; i++)
            text += `GET http://127.0.0.1:${port}/${i} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
          socket.write(text);
        });
        let received = "";
        const answers = () => (received.match(/HTTP\/1\.1 200/g) ?? []).length;
        socket.on("data", (chunk) => {
          received += chunk;
          if (answers() === count) socket.end();
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve({ answers: answers(), closed: answers() < count }));
      });
    // A few ahead: all answered, in turn, over one connection to the destination at a time.
    expect(await pipeline(6)).toEqual({ answers: 6, closed: false });
    expect(most).toBe(1);
    // Far more than MAX_PIPELINED ahead: the connection is closed, and the destination never saw
    // more than one connection at a time nor one per request.
    const flood = await pipeline(2_000);
    expect(flood.closed).toBe(true);
    expect(most).toBe(1);
    expect(total).toBeLessThan(6 + 20);
    await bounded.close();
    web.close();
  });

  it("closes a connection that sends no request head within headersTimeoutMs", {
    timeout: 20_000,
  }, async () => {
    const bounded = await proxy("open", [], undefined, { limits: { headersTimeoutMs: 300 } });
    const silent = connect(bounded.socketPath);
    silent.write("CONNECT 127.0.0.1:1 HTTP/1.1\r\n"); // never finished
    // Closed by the proxy's timeout: without it the half-sent head would be held open for good.
    expect(await closedWithin(silent)).toBeGreaterThanOrEqual(250);
    await bounded.close();
  });

  it("closes an idle tunnel after idleTimeoutMs, and its far end with it", {
    timeout: 20_000,
  }, async () => {
    const bounded = await proxy("open", ["127.0.0.1"], undefined, {
      limits: { idleTimeoutMs: 300 },
    });
    const waited = await new Promise<number>((resolve, reject) => {
      const req = request({
        socketPath: bounded.socketPath,
        method: "CONNECT",
        path: `127.0.0.1:${target.port}`,
      });
      req.once("connect", (response, socket: Socket) => {
        expect(response.statusCode).toBe(200);
        void closedWithin(socket).then(resolve);
      });
      req.once("error", reject);
      req.end();
    });
    // Closed after idleTimeoutMs, not before; a tunnel kept open would outlast this test.
    expect(waited).toBeGreaterThanOrEqual(250);
    await bounded.close();
  });
});

describe("the relay", () => {
  it("carries at most RELAY_MAX_CONNECTIONS connections at once and closes more as they arrive", {
    timeout: 30_000,
  }, async () => {
    // The proxy's side: a unix socket that keeps every connection open, counting them.
    const upstreamPath = join(dir, "relay-up.sock");
    let upstream = 0;
    const held: Socket[] = [];
    const proxySide = createServer((socket) => {
      upstream++;
      held.push(socket);
    });
    await new Promise<void>((resolve) => proxySide.listen(upstreamPath, resolve));
    // Where the relay listens: a free loopback port instead of the sandbox's 3128.
    const free = createServer();
    await new Promise<void>((resolve) => free.listen(0, "127.0.0.1", resolve));
    const port = (free.address() as { port: number }).port;
    await new Promise((resolve) => free.close(resolve));
    const args = relayArgs(upstreamPath);
    args[2] = String(port);
    const relay = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "ignore"] });
    try {
      await new Promise<void>((resolve) => relay.stdout.once("data", () => resolve()));
      const clients: Socket[] = [];
      const closed: Promise<number>[] = [];
      for (let i = 0; i < RELAY_MAX_CONNECTIONS + 6; i++) {
        const client = connect(port, "127.0.0.1");
        client.on("error", () => {});
        clients.push(client);
        closed.push(closedWithin(client));
        await new Promise((resolve) => client.once("connect", resolve));
      }
      // The last six are closed by the relay; the first ones stay, each with its upstream.
      await Promise.all(closed.slice(RELAY_MAX_CONNECTIONS));
      for (let i = 0; i < 200 && upstream < RELAY_MAX_CONNECTIONS; i++)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(upstream).toBe(RELAY_MAX_CONNECTIONS);
      expect(clients.slice(0, RELAY_MAX_CONNECTIONS).every((c) => !c.destroyed)).toBe(true);
      for (const client of clients) client.destroy();
    } finally {
      relay.kill("SIGKILL");
      for (const socket of held) socket.destroy();
      proxySide.close();
    }
  });
});

describe("name resolution stays off the shared thread pool and is bounded per sandbox", () => {
  /** A DNS server on loopback that never answers. */
  let blackHole: ReturnType<typeof createSocket>;
  let dnsPort: number;
  beforeAll(async () => {
    blackHole = createSocket("udp4");
    await new Promise<void>((resolve) => blackHole.bind(0, "127.0.0.1", resolve));
    dnsPort = blackHole.address().port;
  });
  afterAll(() => blackHole.close());

  it("refuses lookups beyond maxPending at once with 503, and times out the rest with 502", {
    timeout: 20_000,
  }, async () => {
    const stalled = await proxy("open", [], undefined, {
      resolver: { servers: [`127.0.0.1:${dnsPort}`], timeoutMs: 200, maxPending: 2 },
    });
    const answers = await Promise.all(
      ["a.stall.test", "b.stall.test", "c.stall.test"].map((name) =>
        connectThrough(stalled.socketPath, `${name}:443`),
      ),
    );
    expect(answers.map((answer) => answer.status).sort()).toEqual([502, 502, 503]);
    expect(answers.find((answer) => answer.status === 503)?.body).toMatch(
      /already has 2 names resolving/,
    );
    expect(answers.find((answer) => answer.status === 502)?.body).toMatch(
      /cannot resolve [abc]\.stall\.test: ETIMEOUT/,
    );
    // Names of the hosts file need no DNS and no slot.
    expect((await connectThrough(stalled.socketPath, `localhost:${target.port}`)).body).toMatch(
      /127\.0\.0\.1|::1/,
    );
    await stalled.close();
  });
});
