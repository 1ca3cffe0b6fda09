/**
 * The docker backend's network policy on a real engine: a container has network `none` (only
 * loopback), and a call with an allowlist or `open` reaches out only through its egress proxy, by
 * way of a relay the bridge runs in the container's network namespace. Test servers listen on
 * the host; the busybox `wget` of the test image honours `http_proxy`.
 */

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBridge } from "../src/bridge.js";
import { createDockerBackend, type DockerBackend } from "../src/docker/index.js";
import { silentLogger } from "../src/logger.js";
import type { NetworkOptions } from "../src/network.js";
import { noEngineReason, requireEngine, skipDocker } from "./docker-engine.js";
import { psLines } from "./helpers.js";

const TOKEN = "docker-network-token";
let counter = 0;
const freshId = () => `docker-net-${process.pid}-${Date.now().toString(36)}-${counter++}`;

/** A host HTTP server on every address that answers with its name and counts its requests. */
async function namedServer(name: string) {
  let hits = 0;
  const server: Server = createServer((_req, res) => {
    hits++;
    res.end(`hello from ${name}`);
  });
  await new Promise<void>((resolve) => server.listen(0, "0.0.0.0", resolve));
  return { server, port: (server.address() as AddressInfo).port, hits: () => hits };
}

/** The relays this process started that are still running (their argv names the socket dir). */
function relays(): string[] {
  return psLines("pid=,ppid=,stat=,args=").filter((line) => {
    const [, ppid, stat] = line.trim().split(/\s+/);
    return (
      Number(ppid) === process.pid && !stat?.startsWith("Z") && line.includes("remote-task-docker-")
    );
  });
}

/** A non-loopback IPv4 address of this machine, where the servers also listen. */
function hostAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flatMap((list) => list ?? [])
    .find((info) => info.family === "IPv4" && !info.internal)?.address;
}

/** Runs `command` on `bridge` in a fresh sandbox, with the network `policy` if given. */
function runnerFor(bridge: ReturnType<typeof createBridge>) {
  return async (command: string, policy?: unknown) => {
    const response = await bridge(
      new Request("http://bridge.test/exec", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({
          sandboxId: freshId(),
          command,
          ...(policy === undefined ? {} : { network: policy }),
        }),
      }),
    );
    return {
      status: response.status,
      body: (await response.json()) as Record<string, unknown>,
    };
  };
}

/* The suite's host servers, backends and bridges, set up and torn down by its hooks. */
let allowed: Awaited<ReturnType<typeof namedServer>>;
let other: Awaited<ReturnType<typeof namedServer>>;
const backends: DockerBackend[] = [];
const bridges: Array<ReturnType<typeof createBridge>> = [];

/** A backend and bridge with the network `network`, torn down with the suite; its call runner. */
async function setUp(network: NetworkOptions, allowPrivate: string[] = []) {
  const { host, image, ulimits } = requireEngine();
  const backend = createDockerBackend({
    image,
    engine: host,
    ulimits,
    pool: 1,
    egress: { allowPrivate },
    logger: silentLogger,
  });
  backends.push(backend);
  await backend.ready;
  const bridge = createBridge({ backend, token: TOKEN, logger: silentLogger, network });
  bridges.push(bridge);
  return runnerFor(bridge);
}

/** The modes claimed, an allowlist and secrets: tests the suite below runs after its setup. */
function allowlistTests(): void {
  it("claims every mode where the bridge can enter the containers' network namespaces", async () => {
    const { host, image, ulimits } = requireEngine();
    const backend = createDockerBackend({ image, engine: host, ulimits, pool: 0 });
    backends.push(backend);
    expect(backend.networkUnavailable).toBeUndefined();
    expect(backend.networkModes).toEqual(["none", "allow", "open"]);
    // gVisor's containers have a network stack of their own: no relay can enter it.
    const gvisor = createDockerBackend({
      image,
      engine: host,
      runtime: "runsc",
      pool: 0,
      logger: silentLogger,
    });
    backends.push(gvisor);
    expect(gvisor.networkModes).toEqual(["none"]);
    expect(gvisor.networkUnavailable).toMatch(/runsc/);
    expect(() =>
      createBridge({
        backend: gvisor,
        token: TOKEN,
        logger: silentLogger,
        network: { ceiling: "open" },
      }),
    ).toThrow(/network/i);
  });

  it("reaches an allowlisted host through the proxy and refuses one not on the list", async () => {
    const both = [`127.0.0.1:${allowed.port}`, `127.0.0.1:${other.port}`];
    const run = await setUp({ ceiling: { allow: both } }, both);
    const before = other.hits();
    const { status, body } = await run(
      [
        `wget -q -O- http://127.0.0.1:${allowed.port}/; echo`,
        `wget -q -O- http://127.0.0.1:${other.port}/ 2>&1; echo "exit $?"`,
        'echo "$http_proxy|$HTTPS_PROXY|$NO_PROXY"',
      ].join("; "),
      { allow: [`127.0.0.1:${allowed.port}`] },
    );
    expect(status).toBe(200);
    const lines = String(body.stdout).split("\n");
    expect(lines[0]).toBe("hello from allowed");
    expect(lines[1]).toMatch(/403/);
    expect(String(body.stdout)).toMatch(/exit [1-9]/);
    expect(String(body.stdout)).toContain("http://127.0.0.1:3128|http://127.0.0.1:3128|\n");
    expect(other.hits()).toBe(before);
  });

  it("puts a secret's value into plain HTTP headers to its host only; the container sees the placeholder", async () => {
    const value = `docker-secret-${process.pid}-${Date.now().toString(36)}`;
    process.env.RT_DOCKER_TEST_SECRET = value;
    const seen: string[] = [];
    const api = createServer((req, res) => {
      seen.push(String(req.headers.authorization));
      res.end("ok");
    });
    await new Promise<void>((resolve) => api.listen(0, "0.0.0.0", resolve));
    const apiPort = (api.address() as AddressInfo).port;
    try {
      const { host, image, ulimits } = requireEngine();
      const backend = createDockerBackend({
        image,
        engine: host,
        ulimits,
        pool: 0,
        egress: { allowPrivate: [`127.0.0.1`] },
        logger: silentLogger,
      });
      backends.push(backend);
      await backend.ready;
      const bridge = createBridge({
        backend,
        token: TOKEN,
        logger: silentLogger,
        network: { ceiling: { allow: [`127.0.0.1:${other.port}`] } },
        secrets: {
          GH_TOKEN: { from: { env: "RT_DOCKER_TEST_SECRET" }, hosts: [`127.0.0.1:${apiPort}`] },
        },
      });
      bridges.push(bridge);
      const response = await bridge(
        new Request("http://bridge.test/exec", {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({
            sandboxId: freshId(),
            secrets: ["GH_TOKEN"],
            network: { allow: [`127.0.0.1:${other.port}`] },
            command: [
              'echo "$GH_TOKEN"',
              `wget -q -O- --header "Authorization: Bearer $GH_TOKEN" http://127.0.0.1:${apiPort}/; echo`,
              `wget -q -O- --header "Authorization: Bearer $GH_TOKEN" http://127.0.0.1:${other.port}/ 2>&1; echo "exit $?"`,
            ].join("; "),
          }),
        }),
      );
      const text = await response.text();
      expect(response.status, text).toBe(200);
      expect(text).not.toContain(value);
      const stdout = String((JSON.parse(text) as { stdout: string }).stdout).split("\n");
      expect(stdout[0]).toMatch(/^rt_secret_[0-9a-f]{32}$/);
      expect(stdout[1]).toBe("ok");
      expect(stdout.join("\n")).toMatch(/403/);
      expect(seen).toEqual([`Bearer ${value}`]);
    } finally {
      delete process.env.RT_DOCKER_TEST_SECRET;
      api.close();
    }
  });
}

/** Open and the relay: tests the suite below runs after its setup. */
function openTests(): void {
  it("with open, never reaches the host's own addresses or private ranges the deployer did not allow", async () => {
    const run = await setUp({ ceiling: "open" });
    const address = hostAddress();
    const before = allowed.hits();
    const targets = [`127.0.0.1:${allowed.port}`, `[::1]:${allowed.port}`, "10.0.0.1:80"];
    if (address !== undefined) targets.push(`${address}:${allowed.port}`);
    const { body } = await run(
      [
        ...targets.map(
          (t) => `wget -q -O- http://${t}/ 2>&1 | tr -d '\\n'; echo " exit \${PIPESTATUS[0]}"`,
        ),
        // What the proxy says, straight from it (a CONNECT tunnel is refused alike).
        `exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT 127.0.0.1:${allowed.port} HTTP/1.1\r\n\r\n' >&3; tail -n 1 <&3`,
      ].join("; "),
      "open",
    );
    const out = String(body.stdout).trim().split("\n");
    expect(out).toHaveLength(targets.length + 1);
    for (const line of out.slice(0, -1)) expect(line).toMatch(/403 Forbidden exit [1-9]$/);
    expect(out.at(-1)).toMatch(/connection to 127\.0\.0\.1:\d+ refused: .*loopback/);
    expect(allowed.hits()).toBe(before);
  });

  it("leaves no route around the proxy", async () => {
    const run = await setUp({ ceiling: "open" }, [`127.0.0.1:${allowed.port}`]);
    const address = hostAddress() ?? "10.0.0.1";
    const before = allowed.hits();
    const { body } = await run(
      [
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
        // Without the proxy variables: straight to an address.
        `env -u http_proxy wget -q -O- http://${address}:${allowed.port}/ >/dev/null 2>&1 || echo direct-refused`,
        `(exec 3<>/dev/tcp/${address}/${allowed.port}) 2>/dev/null || echo tcp-refused`,
        "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null || echo internet-refused",
      ].join("; "),
      "open",
    );
    expect(body.stdout).toBe("lo\ndirect-refused\ntcp-refused\ninternet-refused\n");
    expect(allowed.hits()).toBe(before);
  });

  it("runs the relay only while its call does, and none for network none", async () => {
    const run = await setUp({ ceiling: "open" }, [`127.0.0.1:${allowed.port}`]);
    const call = run(`wget -q -O- http://127.0.0.1:${allowed.port}/; sleep 2`, "open");
    let seen: string[] = [];
    for (let i = 0; i < 100 && seen.length === 0; i++) {
      seen = relays();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(seen).toHaveLength(1);
    // nsenter and setpriv exec the relay: the bridge's own Node with the relay's source.
    expect(seen[0]).toContain(`${process.execPath} -e `);
    expect(seen[0]).toMatch(/ 3128 \/\S+\/egress-\d+\.sock$/);
    const { body } = await call;
    expect(body.stdout).toBe("hello from allowed");
    expect(relays()).toEqual([]);
    const none = run("sleep 1; echo done");
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(relays()).toEqual([]);
    expect((await none).body.stdout).toBe("done\n");
  });

  it("leaves the ceiling to the bridge: a policy above it is refused with 403", async () => {
    const run = await setUp({ ceiling: { allow: [`127.0.0.1:${allowed.port}`] } }, [
      `127.0.0.1:${allowed.port}`,
    ]);
    expect((await run("true", "open")).status).toBe(403);
    expect((await run("true", { allow: [`127.0.0.1:${other.port}`] })).status).toBe(403);
    const { status, body } = await run(`wget -q -O- http://127.0.0.1:${allowed.port}/`, {
      allow: [`127.0.0.1:${allowed.port}`],
    });
    expect(status).toBe(200);
    expect(body.stdout).toBe("hello from allowed");
  });
}

if (skipDocker) it.skip(`docker network (SKIPPED: ${noEngineReason})`, () => {});
else
  describe("docker backend network policy", () => {
    beforeAll(async () => {
      allowed = await namedServer("allowed");
      other = await namedServer("other");
    });
    afterAll(async () => {
      await Promise.all(bridges.map((b) => b.shutdown()));
      await Promise.all(backends.map((b) => b.close()));
      allowed?.server.close();
      other?.server.close();
    });

    allowlistTests();
    openTests();
  });
