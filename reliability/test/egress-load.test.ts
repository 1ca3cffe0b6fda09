import { createSocket } from "node:dgram";
import { lookup } from "node:dns/promises";
import { readFile, rm } from "node:fs/promises";
import { request } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_EGRESS_LIMITS,
  type EgressProxyOptions,
  startEgressProxy,
} from "../../packages/bridge/src/host/egress.js";
import { parseHostPattern } from "../../packages/bridge/src/network.js";
import { makeTmpRoot } from "./support/tmp-root.js";

/**
 * One tenant's sandbox floods its egress proxy (connections, name lookups that never answer);
 * what the bridge holds stays within the per-sandbox bounds, and another tenant's proxy, the
 * bridge's own name resolution and file work go on as usual. Loopback only.
 */
let dir: string;
let target: Server;
let targetPort: number;
let blackHole: ReturnType<typeof createSocket>;
let sockets = 0;

beforeAll(async () => {
  dir = await makeTmpRoot("rt-egress-load-");
  target = createServer((socket) => socket.on("data", () => socket.end("pong")));
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  targetPort = (target.address() as { port: number }).port;
  blackHole = createSocket("udp4");
  await new Promise<void>((resolve) => blackHole.bind(0, "127.0.0.1", resolve));
});

afterAll(async () => {
  target.close();
  blackHole.close();
  await rm(dir, { recursive: true, force: true });
});

function proxy(extra: Partial<EgressProxyOptions> = {}) {
  const socketPath = join(dir, `p${++sockets}.sock`);
  return startEgressProxy({
    socketPath,
    policy: "open",
    allowPrivate: [parseHostPattern("127.0.0.1"), parseHostPattern("localhost")],
    protectedEndpoints: () => [],
    ...extra,
  }).then((started) => Object.assign(started, { socketPath }));
}

function tunnel(socketPath: string, authority: string): Promise<{ status: number; ms: number }> {
  const start = Date.now();
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: "CONNECT", path: authority });
    req.once("connect", (response, socket: Socket) => {
      socket.destroy();
      resolve({ status: response.statusCode ?? 0, ms: Date.now() - start });
    });
    req.once("error", reject);
    req.end();
  });
}

describe("a flooding sandbox is held to its bounds", () => {
  it("1,000 connections at once: at most maxConnections stay open, the neighbour is served", async () => {
    const flooded = await proxy();
    const neighbour = await proxy();
    const flood: Socket[] = [];
    let closedEarly = 0;
    await Promise.all(
      Array.from(
        { length: 1_000 },
        () =>
          new Promise<void>((resolve) => {
            const socket = connect(flooded.socketPath);
            flood.push(socket);
            socket.on("error", () => {});
            socket.resume();
            socket.once("close", () => closedEarly++);
            socket.once("connect", () => resolve());
            socket.once("close", () => resolve());
          }),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const open = flood.filter((socket) => !socket.destroyed).length;
    expect(open).toBeLessThanOrEqual(DEFAULT_EGRESS_LIMITS.maxConnections);
    expect(closedEarly).toBeGreaterThanOrEqual(1_000 - DEFAULT_EGRESS_LIMITS.maxConnections);
    const served = await tunnel(neighbour.socketPath, `127.0.0.1:${targetPort}`);
    expect(served.status).toBe(200);
    for (const socket of flood) socket.destroy();
    await Promise.all([flooded.close(), neighbour.close()]);
  });

  it("64 names that never resolve: 8 pending at most, the thread pool and other tenants unaffected", async () => {
    const stalled = await proxy({
      resolver: { servers: [`127.0.0.1:${blackHole.address().port}`], timeoutMs: 3_000 },
    });
    const neighbour = await proxy();
    let timedOut = 0;
    const flood = Array.from({ length: 64 }, (_, i) =>
      tunnel(stalled.socketPath, `n${i}.stall.test:443`).then((answer) => {
        if (answer.status === 502) timedOut++;
        return answer;
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The bridge's own getaddrinfo and file reads (libuv's pool) answer while the 8 stalled
    // names are still pending: none of those has timed out yet.
    await Promise.all([
      lookup("localhost"),
      readFile("/etc/hosts"),
      ...Array.from({ length: 8 }, () => lookup("localhost")),
    ]);
    expect(timedOut).toBe(0);
    expect((await tunnel(neighbour.socketPath, `localhost:${targetPort}`)).status).toBe(200);
    const answers = await Promise.all(flood);
    const refused = answers.filter((answer) => answer.status === 503).length;
    expect(refused).toBeGreaterThanOrEqual(64 - 8);
    expect(answers.filter((answer) => answer.status === 502).length).toBe(64 - refused);
    await Promise.all([stalled.close(), neighbour.close()]);
  });
});
