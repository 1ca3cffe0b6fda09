import { existsSync, readdirSync } from "node:fs";
import { readdir, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type ExecResult, execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../src/index.js";
import {
  createLocalBackend,
  type LocalBackend,
  type LocalBackendOptions,
} from "../src/local/index.js";
import {
  type EmbeddedBridge,
  type EmbeddedBridgeOptions,
  startEmbeddedBridge,
} from "../src/node.js";
import { descendantsWith, eventually, expectError, freshId, makeTmpRoot } from "./helpers.js";
import { bwrap, bwrapRequired } from "./isolation.js";

const skipBwrap = !bwrap.ok && !bwrapRequired;
const CURL = "/usr/bin/curl";

/**
 * A loopback HTTP server that counts its requests and answers with its name; `/hang` never
 * answers, and `hanging` says how many such requests still have their connection open.
 */
async function namedServer(
  name: string,
): Promise<{ server: Server; port: number; hits: () => number; hanging: () => number }> {
  let hits = 0;
  let hanging = 0;
  const server = createServer((req, res) => {
    hits++;
    if (req.url === "/hang") {
      hanging++;
      req.socket.once("close", () => hanging--);
      return;
    }
    res.end(`hello from ${name}`);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    server,
    port: (server.address() as AddressInfo).port,
    hits: () => hits,
    hanging: () => hanging,
  };
}

interface Host {
  bridge: EmbeddedBridge<LocalBackend>;
  backend: LocalBackend;
  port: number;
  post(body: Record<string, unknown>): Promise<Response>;
  run(command: string, network?: unknown): Promise<ExecResult>;
  close(): Promise<void>;
}

async function localHost(
  local: LocalBackendOptions,
  network: EmbeddedBridgeOptions["network"],
): Promise<Host> {
  const tmpRoot = await makeTmpRoot("rt-net-");
  const backend = createLocalBackend({ killGraceMs: 300, tmpRoot, ...local });
  const bridge = await startEmbeddedBridge({ backend, logger: silentLogger, network });
  const post = (body: Record<string, unknown>) =>
    fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: freshId("net"), timeoutSeconds: 30, ...body }),
    });
  return {
    bridge,
    backend,
    port: Number(new URL(bridge.url).port),
    post,
    async run(command, policy) {
      const response = await post({
        command,
        ...(policy === undefined ? {} : { network: policy }),
      });
      const json: unknown = await response.json();
      expect(response.status, JSON.stringify(json)).toBe(200);
      return execResultSchema.parse(json);
    },
    async close() {
      await bridge.close();
      await backend.close();
      expect(await readdir(tmpRoot)).toEqual([]);
      await rm(tmpRoot, { recursive: true, force: true });
    },
  };
}

/**
 * `curl` of a URL inside the sandbox: prints one line, the body (without its final newline), then
 * ` status=<HTTP status>` (` connect=<status>` for a CONNECT tunnel) and ` rc=<curl's exit>`.
 */
function curl(url: string, flags = ""): string {
  const connect = flags.includes("--proxytunnel") ? " connect=%{http_connect}" : "";
  return `rm -f /tmp/body; w=$(${CURL} -s --max-time 5 ${flags} -o /tmp/body -w 'status=%{http_code}${connect}' ${url}); rc=$?; echo "$(cat /tmp/body 2>/dev/null) $w rc=$rc"`;
}

let standIn: Awaited<ReturnType<typeof namedServer>>;
let other: Awaited<ReturnType<typeof namedServer>>;

beforeAll(async () => {
  standIn = await namedServer("the internet");
  other = await namedServer("another loopback service");
});

afterAll(async () => {
  standIn?.server.close();
  other?.server.close();
});

describe.skipIf(skipBwrap)(
  "network under bwrap: allowlist ceiling, no private host allowed",
  () => {
    let host: Host;
    const hits = () => standIn.hits() + other.hits();

    beforeAll(async () => {
      expect(existsSync(CURL), `${CURL} is needed inside the sandbox`).toBe(true);
      host = await localHost(
        { isolation: "bwrap" },
        { default: "none", ceiling: { allow: [`127.0.0.1:${standIn.port}`, "localhost"] } },
      );
    });

    afterAll(async () => {
      await host?.close();
    });

    it("declares the modes it enforces and reports the policy on /health", async () => {
      expect(host.backend.networkModes).toEqual(["none", "allow", "open"]);
      const response = await fetch(`${host.bridge.url}/health`, {
        headers: { authorization: `Bearer ${host.bridge.token}` },
      });
      const health = healthResponseSchema.parse(await response.json());
      expect(health.network).toEqual({
        default: "none",
        ceiling: { allow: [`127.0.0.1:${standIn.port}`, "localhost"] },
      });
    });

    it("none (the default) reaches nothing: not the stand-in, not the bridge", {
      timeout: 30_000,
    }, async () => {
      const before = hits();
      const result = await host.run(
        [
          'echo "proxy variables: $(env | grep -ci proxy)"',
          curl(`http://127.0.0.1:${standIn.port}/`),
          curl(`http://127.0.0.1:${host.port}/health`),
          curl(`http://127.0.0.1:${standIn.port}/`, "-x http://127.0.0.1:3128"),
        ].join("; "),
      );
      const lines = result.stdout.trim().split("\n");
      expect(lines[0]).toBe("proxy variables: 0");
      for (const line of lines.slice(1)) expect(line).toMatch(/status=000 rc=7$/);
      expect(hits()).toBe(before);
    });

    it("an allowlist reaches exactly the allowed host and port, by plain HTTP and by CONNECT", {
      timeout: 30_000,
    }, async () => {
      const before = standIn.hits();
      const result = await host.run(
        [
          curl(`http://127.0.0.1:${standIn.port}/`),
          curl(`http://127.0.0.1:${standIn.port}/`, "--proxytunnel"),
        ].join("; "),
        { allow: [`127.0.0.1:${standIn.port}`] },
      );
      expect(result.stdout.trim().split("\n")).toEqual([
        "hello from the internet status=200 rc=0",
        "hello from the internet status=200 connect=200 rc=0",
      ]);
      expect(standIn.hits()).toBe(before + 2);
    });

    it("an allowlist does not reach the bridge's port, another loopback service, 169.254.169.254, or anything without the proxy", {
      timeout: 30_000,
    }, async () => {
      const before = hits();
      const result = await host.run(
        [
          curl(`http://127.0.0.1:${host.port}/health`),
          curl(`http://127.0.0.1:${other.port}/`),
          curl("http://169.254.169.254/latest/meta-data/"),
          curl(`http://127.0.0.1:${other.port}/`, "--proxytunnel"),
          curl(`http://127.0.0.1:${standIn.port}/`, "--noproxy '*'"),
        ].join("; "),
        { allow: [`127.0.0.1:${standIn.port}`] },
      );
      const lines = result.stdout.trim().split("\n");
      expect(lines.slice(0, 3)).toEqual([
        `remote-task egress proxy: connection to 127.0.0.1:${host.port} refused: not in the call's allowlist (network policy: allow 127.0.0.1:${standIn.port}). status=403 rc=0`,
        `remote-task egress proxy: connection to 127.0.0.1:${other.port} refused: not in the call's allowlist (network policy: allow 127.0.0.1:${standIn.port}). status=403 rc=0`,
        `remote-task egress proxy: connection to 169.254.169.254:80 refused: not in the call's allowlist (network policy: allow 127.0.0.1:${standIn.port}). status=403 rc=0`,
      ]);
      // curl reports a refused CONNECT as its exit 56; a direct connection has no route (7).
      expect(lines[3]).toBe(" status=000 connect=403 rc=56");
      expect(lines[4]).toMatch(/status=000 rc=7$/);
      expect(hits()).toBe(before);
    });

    it("a name the deployer allowed that resolves to loopback is refused: the proxy checks the address it connects to", {
      timeout: 30_000,
    }, async () => {
      const before = standIn.hits();
      const result = await host.run(curl(`http://localhost:${standIn.port}/`), {
        allow: ["localhost"],
      });
      expect(result.stdout).toMatch(
        new RegExp(
          `connection to localhost:${standIn.port} refused: (127\\.0\\.0\\.1|::1) is not public \\(loopback\\) and the deployer has not allowed it \\(network policy: allow localhost\\)\\. status=403 rc=0`,
        ),
      );
      expect(standIn.hits()).toBe(before);
    });

    it("asking for more than the ceiling is a 403 and runs nothing", {
      timeout: 30_000,
    }, async () => {
      const started = host.backend.stats().started;
      await expectError(await host.post({ command: "true", network: "open" }), "forbidden");
      await expectError(
        await host.post({ command: "true", network: { allow: [`127.0.0.1:${other.port}`] } }),
        "forbidden",
      );
      expect(host.backend.stats().started).toBe(started);
    });

    it("sees its own call's relay while the call runs (what the next test counts on)", {
      timeout: 30_000,
    }, async () => {
      const running = host.run("sleep 2", { allow: [`127.0.0.1:${standIn.port}`] });
      await eventually(
        () => descendantsWith("/run/remote-task/node").length > 0,
        "the call's relay running",
      );
      await running;
    });

    it("leaves no proxy socket and no relay behind", async () => {
      expect(host.backend.liveSandboxes()).toBe(0);
      expect(readdirSync(host.backend.stateDir).filter((name) => name.endsWith(".sock"))).toEqual(
        [],
      );
      // Relays of this file's calls only: other processes on the machine may run bridges too.
      expect(descendantsWith("/run/remote-task/node")).toEqual([]);
    });
  },
);

describe.skipIf(skipBwrap)(
  "network under bwrap: open ceiling, loopback allowed by the deployer",
  () => {
    let host: Host;

    beforeAll(async () => {
      host = await localHost(
        { isolation: "bwrap", egress: { allowPrivate: ["127.0.0.1"] } },
        { default: "none", ceiling: "open" },
      );
    });

    afterAll(async () => {
      await host?.close();
    });

    it("open reaches the stand-in and the deployer's private hosts, never the bridge or 169.254.169.254", {
      timeout: 30_000,
    }, async () => {
      const before = standIn.hits();
      const result = await host.run(
        [
          curl(`http://127.0.0.1:${standIn.port}/`),
          curl(`http://127.0.0.1:${standIn.port}/`, "--proxytunnel"),
          curl(`http://127.0.0.1:${host.port}/health`),
          curl(`http://127.0.0.1:${host.port}/health`, "--proxytunnel"),
          curl("http://169.254.169.254/latest/meta-data/"),
          curl(`http://127.0.0.1:${other.port}/`),
        ].join("; "),
        "open",
      );
      expect(result.stdout.trim().split("\n")).toEqual([
        "hello from the internet status=200 rc=0",
        "hello from the internet status=200 connect=200 rc=0",
        `remote-task egress proxy: connection to 127.0.0.1:${host.port} refused: 127.0.0.1 port ${host.port} is the bridge itself (network policy: open). status=403 rc=0`,
        " status=000 connect=403 rc=56",
        "remote-task egress proxy: connection to 169.254.169.254:80 refused: 169.254.169.254 is not public (link-local) and the deployer has not allowed it (network policy: open). status=403 rc=0",
        "hello from another loopback service status=200 rc=0",
      ]);
      expect(standIn.hits()).toBe(before + 2);
    });

    it("a call that times out with connections open through its proxy leaves none open", {
      timeout: 30_000,
    }, async () => {
      const before = standIn.hits();
      const response = await host.post({
        command: `${CURL} -s http://127.0.0.1:${standIn.port}/hang & ${CURL} -s --proxytunnel http://127.0.0.1:${standIn.port}/hang`,
        network: "open",
        timeoutSeconds: 2,
      });
      const result = execResultSchema.parse(await response.json());
      expect(result.outcome).toBe("timeout");
      expect(standIn.hits()).toBe(before + 2);
      await eventually(() => standIn.hanging() === 0, "the stand-in's connections closed", 5_000);
      expect(host.backend.liveSandboxes()).toBe(0);
      expect(readdirSync(host.backend.stateDir).filter((name) => name.endsWith(".sock"))).toEqual(
        [],
      );
    });

    it("stdin still reaches the command when the relay runs beside it", {
      timeout: 30_000,
    }, async () => {
      const response = await host.post({
        command: "cat",
        network: "open",
        stdin: "to the command",
      });
      const result = execResultSchema.parse(await response.json());
      expect(result).toMatchObject({ code: 0, stdout: "to the command" });
    });

    it("a caller cannot name a private address itself under open: 403", {
      timeout: 30_000,
    }, async () => {
      await expectError(
        await host.post({ command: "true", network: { allow: [`127.0.0.1:${standIn.port}`] } }),
        "forbidden",
      );
    });

    it("a call without network gets none", { timeout: 30_000 }, async () => {
      const before = standIn.hits();
      const result = await host.run(curl(`http://127.0.0.1:${standIn.port}/`));
      expect(result.stdout).toBe(" status=000 rc=7\n");
      expect(standIn.hits()).toBe(before);
    });
  },
);

describe("isolation none controls no network", () => {
  it("declares no modes: /health has no network, a call naming one is a 403", {
    timeout: 30_000,
  }, async () => {
    const host = await localHost({ isolation: "none" }, undefined);
    try {
      expect(host.backend.networkModes).toBeUndefined();
      const response = await fetch(`${host.bridge.url}/health`, {
        headers: { authorization: `Bearer ${host.bridge.token}` },
      });
      const health = healthResponseSchema.parse(await response.json());
      expect(health.network).toBeUndefined();
      await expectError(await host.post({ command: "true", network: "none" }), "forbidden");
    } finally {
      await host.close();
    }
  });

  it("refuses a network option for the bridge, and leaves nothing behind", async () => {
    const tmpRoot = await makeTmpRoot("rt-net-");
    await expect(
      startEmbeddedBridge({
        local: { isolation: "none", tmpRoot },
        logger: silentLogger,
        network: { ceiling: "open" },
      }),
    ).rejects.toThrow(/does not control network access/);
    expect(await readdir(tmpRoot)).toEqual([]);
    await rm(tmpRoot, { recursive: true, force: true });
  });
});
