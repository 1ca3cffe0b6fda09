/**
 * The docker backend on a real engine (Podman's Docker-compatible API, see docker-engine.ts):
 * limits, network none, stdin, cwd, the task environment, removal of the container on every
 * path, and the sweep of what a killed bridge left.
 */

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Agent } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { healthResponseSchema } from "@remote-task/protocol";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBridge } from "../src/bridge.js";
import { createEngineClient } from "../src/docker/engine.js";
import {
  createDockerBackend,
  type DockerBackend,
  DockerUnavailableError,
  LABELS,
} from "../src/docker/index.js";
import { silentLogger } from "../src/logger.js";
import { noEngineReason, requireEngine, skipDocker } from "./docker-engine.js";
import { psLines } from "./helpers.js";

const TOKEN = "docker-test-token";
let counter = 0;
const freshId = () => `docker-test-${process.pid}-${Date.now().toString(36)}-${counter++}`;

function post(bridge: ReturnType<typeof createBridge>, path: string, body: unknown) {
  return bridge(
    new Request(`http://bridge.test${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
}

/** The containers on the engine with `label` (`name=value` or just `name`). */
async function containersWith(label: string): Promise<string[]> {
  const engine = createEngineClient(
    { socketPath: requireEngine().host.slice("unix://".length) },
    new Agent(),
  );
  try {
    const { body } = await engine.json<Array<{ Id: string }>>({
      method: "GET",
      path: "/containers/json",
      query: { all: "1", filters: JSON.stringify({ label: [label] }) },
    });
    return body.map((c) => c.Id);
  } finally {
    engine.close();
  }
}

/** Waits (ten seconds at most) until no container has `label`: removal may follow the answer. */
async function noContainers(label: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await containersWith(label)).length === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  expect(await containersWith(label)).toEqual([]);
}

/** `ps` lines (pid, ppid, args) of the processes whose parent is `pid`. */
function childrenOf(pid: number): string[] {
  return psLines("pid=,ppid=,args=").filter((line) => Number(line.trim().split(/\s+/)[1]) === pid);
}

/** Whether process `pid` exists and is not a zombie. */
function running(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}

/**
 * In the calling describe: a backend and bridge with the engine's defaults, `exec` on that bridge
 * (or another), `withLimits` for a bridge on a backend of its own; every backend closed after it.
 */
function useDockerBridge() {
  const fx = { limited: [] as DockerBackend[] } as {
    backend: DockerBackend;
    bridge: ReturnType<typeof createBridge>;
    limited: DockerBackend[];
  };
  beforeAll(async () => {
    const { host, image, ulimits } = requireEngine();
    fx.backend = createDockerBackend({ image, engine: host, ulimits });
    await fx.backend.ready;
    fx.bridge = createBridge({ backend: fx.backend, token: TOKEN, logger: silentLogger });
  });
  afterAll(async () => {
    await fx.bridge?.shutdown();
    await fx.backend?.close();
    await Promise.all(fx.limited.map((b) => b.close()));
  });

  async function exec(body: Record<string, unknown>, on = fx.bridge) {
    const response = await post(on, "/exec", { sandboxId: freshId(), ...body });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  }

  async function withLimits(limits: Parameters<typeof createDockerBackend>[0]["limits"]) {
    const { host, image, ulimits } = requireEngine();
    const own = createDockerBackend({ image, engine: host, ulimits, limits });
    fx.limited.push(own);
    await own.ready;
    return createBridge({ backend: own, token: TOKEN, logger: silentLogger });
  }

  return { fx, exec, withLimits };
}

if (skipDocker) it.skip(`docker backend (SKIPPED: ${noEngineReason})`, () => {});
else {
  describe("docker backend", () => {
    const { fx, exec } = useDockerBridge();
    const { limited } = fx;

    it("runs as a non-root user with no capabilities, a read-only image and the task environment", async () => {
      const { status, body } = await exec({
        command:
          'id -u; grep CapEff /proc/self/status; touch /etc/x 2>/dev/null || echo ro; echo "$HOME $LANG $TMPDIR $PWD $MINE"; echo $BASH_VERSION | cut -c1; touch /workspace/f /tmp/f && echo writable',
        env: { MINE: "value" },
      });
      expect(status).toBe(200);
      expect(String(body.stdout).replace(/^6\d{4}\n/, "<uid>\n")).toBe(
        "<uid>\nCapEff:\t0000000000000000\nro\n/workspace C.UTF-8 /tmp /workspace value\n5\nwritable\n",
      );
    });

    it("reports backend, image and runtime on /health", async () => {
      const response = await fx.bridge(
        new Request("http://bridge.test/health", { headers: { authorization: `Bearer ${TOKEN}` } }),
      );
      const health = healthResponseSchema.parse(await response.json());
      expect(health.backend).toBe("docker");
      expect(health.isolation).toBe("container");
      expect(health.sandbox).toMatchObject({
        image: requireEngine().image,
        runtime: "runc",
        teardown: "container",
        memoryBytes: { by: "container" },
      });
      expect(health.network).toEqual({ default: "none", ceiling: "none" });
      expect(health.warmPool?.target).toBe(2);
    });

    it("reports the engine's default runtime as soon as it is ready, before any /health", async () => {
      const { host, image, ulimits } = requireEngine();
      const own = createDockerBackend({ image, engine: host, ulimits, pool: 0 });
      limited.push(own);
      await own.ready;
      expect(own.sandbox.runtime).toBe("runc");
    });

    it("is not ready when no container can start: the engine's reason, and no container left", async () => {
      const { host, image, ulimits } = requireEngine();
      const own = createDockerBackend({
        image,
        engine: host,
        ulimits,
        user: "no-such-user",
        pool: 0,
      });
      limited.push(own);
      const error = await own.ready.then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(DockerUnavailableError.isInstance(error)).toBe(true);
      expect(error?.message).toMatch(
        /^No container can be started on this engine, .*unable to find user no-such-user/,
      );
      expect(await containersWith(`${LABELS.owner}=${own.instance}`)).toEqual([]);
    });

    it.skipIf(requireEngine().ulimits.nproc === undefined)(
      "an engine that may not raise nproc: not ready, and the message names the value to pass",
      async () => {
        const { host, image } = requireEngine();
        const own = createDockerBackend({ image, engine: host, pool: 0 });
        limited.push(own);
        const error = await own.ready.then(
          () => undefined,
          (e: unknown) => e as Error,
        );
        expect(error?.message).toContain("error setting rlimit type 6");
        expect(error?.message).toContain(
          `pass --docker-ulimit nproc=${requireEngine().ulimits.nproc} (the docker backend's ulimits: { nproc: ${requireEngine().ulimits.nproc} })`,
        );
      },
    );

    it.skipIf(requireEngine().ulimits.nproc === undefined)(
      "the engine script says which --docker-ulimit the containers need",
      () => {
        const script = join(__dirname, "../../../scripts/docker-engine.mjs");
        const run = spawnSync(process.execPath, [script, "ensure"], { encoding: "utf8" });
        expect(run.status).toBe(0);
        expect(run.stderr).toContain(
          `containers on this engine need --docker-ulimit nproc=${requireEngine().ulimits.nproc}`,
        );
      },
    );

    it("refuses a ulimit name the engine does not know", () => {
      const { host, image } = requireEngine();
      expect(() => createDockerBackend({ image, engine: host, ulimits: { bogus: 5 } })).toThrow(
        /ulimit bogus is not an rlimit the engine knows; use one of as, core/,
      );
    });
  });

  describe("docker backend: limits, network, stdin and cwd", () => {
    const { fx, exec, withLimits } = useDockerBridge();

    it("enforces the memory limit", async () => {
      const small = await withLimits({ memoryBytes: 32 * 1024 * 1024 });
      const { body } = await exec(
        { command: 'x=$(printf "%60000000s" ""); echo $' + "{#x}", timeoutSeconds: 60 },
        small,
      );
      // The kernel's OOM killer: SIGKILL, and the string's length is never printed.
      expect(body.code).toBe(137);
      expect(body.stdout).toBe("");
      await small.shutdown();
    });

    it("enforces the process limit", async () => {
      const small = await withLimits({ processes: 8 });
      const { body } = await exec(
        {
          // busybox's sh gives up at the first fork the limit refuses.
          command: "busybox sh -c 'for i in $(seq 20); do sleep 2 & echo started; done'",
          timeoutSeconds: 60,
        },
        small,
      );
      const started = String(body.stdout).split("\n").filter(Boolean).length;
      expect(started).toBeGreaterThan(2);
      expect(started).toBeLessThan(8);
      expect(body.stderr).toContain("can't fork");
      await small.shutdown();
    });

    it("sizes /workspace and limits open files", async () => {
      const small = await withLimits({ workspaceBytes: 4 * 1024 * 1024, openFiles: 64 });
      const { body } = await exec(
        {
          command:
            "head -c 8000000 /dev/zero > /workspace/big; echo $?; ls -l /workspace/big | awk '{print $5}'; ulimit -n",
        },
        small,
      );
      expect(body.stdout).toBe("1\n4194304\n64\n");
      await small.shutdown();
    });

    it("has no network but loopback by default, and refuses a policy above the ceiling with 403", async () => {
      const { body } = await exec({
        command:
          "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; wget -q -T 2 -O- http://1.1.1.1/ || echo unreachable",
      });
      expect(body.stdout).toBe("lo\nunreachable\n");
      const open = await exec({ command: "true", network: "open" });
      expect(open.status).toBe(403);
    });

    it("delivers a large stdin exactly", async () => {
      const data = "0123456789abcdef".repeat(65_536); // 1 MiB
      const { body } = await exec({ command: "wc -c; echo done", stdin: data });
      expect(body.stdout).toBe("1048576\ndone\n");
    });

    it("refuses a cwd that does not exist instead of creating it, and runs in one that does", async () => {
      for (const cwd of ["/workspace/missing", "/nonexistent"]) {
        const { status, body } = await exec({ command: "pwd", cwd });
        expect(status).toBe(400);
        expect(body.code).toBe("invalid_request");
        expect(String(body.error)).toContain(`cwd ${cwd} is not a directory`);
      }
      const { body } = await exec({ command: "pwd", cwd: "/etc" });
      expect(body.stdout).toBe("/etc\n");
      // Every container is removed, the refused ones too (the last perhaps just after the answer).
      for (let i = 0; i < 500 && fx.backend.liveSandboxes() > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(fx.backend.liveSandboxes()).toBe(0);
    });
  });

  describe("docker backend: containers removed and pooled", () => {
    const { fx, exec } = useDockerBridge();
    const { limited } = fx;

    it("removes the container after exit, timeout and cancel", async () => {
      // No pool: every container of this backend is one of a call.
      const { host, image, ulimits } = requireEngine();
      const own = createDockerBackend({ image, engine: host, ulimits, pool: 0 });
      limited.push(own);
      await own.ready;
      const on = createBridge({ backend: own, token: TOKEN, logger: silentLogger });
      const owned = `${LABELS.owner}=${own.instance}`;
      expect((await exec({ command: "echo hi" }, on)).body.outcome).toBe("exited");
      await noContainers(owned);
      expect((await exec({ command: "sleep 30", timeoutSeconds: 1 }, on)).body.outcome).toBe(
        "timeout",
      );
      await noContainers(owned);
      const sandboxId = freshId();
      const cancelled = post(on, "/exec", { sandboxId, command: "sleep 30" });
      for (let i = 0; i < 200 && own.stats().started === 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      for (let i = 0; i < 200; i++) {
        if ((await containersWith(owned)).length > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await post(on, "/cancel", { sandboxId });
      expect(((await (await cancelled).json()) as { outcome: string }).outcome).toBe("cancelled");
      for (let i = 0; i < 500 && own.liveSandboxes() > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(own.liveSandboxes()).toBe(0);
      await noContainers(owned);
      await on.shutdown();
    });

    it("keeps a pool of containers made ahead, each used once", async () => {
      const { host, image, ulimits } = requireEngine();
      const own = createDockerBackend({ image, engine: host, ulimits, pool: 2 });
      limited.push(own);
      await own.ready;
      const owned = `${LABELS.owner}=${own.instance}`;
      /** The pool's two containers, once they are not all among `before`. */
      const pooled = async (before: string[] = []) => {
        for (let i = 0; i < 250; i++) {
          const ids = await containersWith(owned);
          if (ids.length === 2 && ids.some((id) => !before.includes(id))) return ids;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        throw new Error("the pool was not refilled");
      };
      const first = await pooled();
      const on = createBridge({ backend: own, token: TOKEN, logger: silentLogger });
      expect((await exec({ command: "echo one" }, on)).body.stdout).toBe("one\n");
      // The used container is removed after the answer: wait for its replacement.
      const second = await pooled(first);
      // One pooled container served the call and is gone; a new one took its place.
      expect(second.filter((id) => first.includes(id))).toHaveLength(1);
      await on.shutdown();
      await own.close();
      expect(await containersWith(owned)).toEqual([]);
    });

    it("makes a fresh container when the pooled one is gone", async () => {
      const { host, image, ulimits } = requireEngine();
      const own = createDockerBackend({ image, engine: host, ulimits, pool: 1 });
      limited.push(own);
      await own.ready;
      const owned = `${LABELS.owner}=${own.instance}`;
      let pooled: string[] = [];
      for (let i = 0; i < 250 && pooled.length === 0; i++) {
        pooled = await containersWith(owned);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(pooled).toHaveLength(1);
      // Removed behind the backend's back (an engine restart does the same).
      const engine = createEngineClient({ socketPath: host.slice("unix://".length) }, new Agent());
      await engine.json({
        method: "DELETE",
        path: `/containers/${pooled[0]}`,
        query: { force: "1" },
      });
      engine.close();
      const on = createBridge({ backend: own, token: TOKEN, logger: silentLogger });
      expect((await exec({ command: "echo fresh" }, on)).body.stdout).toBe("fresh\n");
      await on.shutdown();
    });

    it("removes every container on close, and a new backend leaves a live one's alone", async () => {
      const { host, image, ulimits } = requireEngine();
      const other = createDockerBackend({ image, engine: host, ulimits, pool: 0 });
      const controller = new AbortController();
      const running = await other.start({
        sandboxId: freshId(),
        command: "sleep 30",
        cwd: "/workspace",
        env: {},
        timeoutMs: 30_000,
        signal: controller.signal,
      });
      running.exit.catch(() => {});
      const owned = `${LABELS.owner}=${other.instance}`;
      expect(await containersWith(owned)).toHaveLength(1);
      const third = createDockerBackend({ image, engine: host, ulimits });
      await third.ready;
      expect(await containersWith(owned)).toHaveLength(1);
      await third.close();
      await other.close();
      expect(await containersWith(owned)).toEqual([]);
    });
  });
}

describe.skipIf(skipDocker)("docker backend after a crash", () => {
  let dir: string;
  let child: ChildProcess | undefined;
  afterAll(() => {
    child?.kill("SIGKILL");
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it("sweeps the containers of a bridge process killed with SIGKILL; its relay dies with it", async () => {
    const { host, image, ulimits } = requireEngine();
    dir = mkdtempSync(join(tmpdir(), "docker-crash-"));
    // The child: a backend from this package's source, bundled, running two calls forever.
    const entry = join(dir, "child.ts");
    writeFileSync(
      entry,
      `import { createDockerBackend } from ${JSON.stringify(join(__dirname, "../src/docker/index.ts"))};
const [host, image, ulimits] = process.argv.slice(2);
const backend = createDockerBackend({ image, engine: host, ulimits: JSON.parse(ulimits), pool: 0 });
const signal = new AbortController().signal;
for (const n of [1, 2]) {
  const network = n === 2 ? "open" : "none";
  await backend.start({ sandboxId: "crash-" + process.pid + "-" + n, command: "sleep 60", cwd: "/workspace", env: {}, timeoutMs: 60000, signal, network });
}
process.stdout.write(backend.instance + "\\n");
setInterval(() => {}, 1000);
`,
    );
    const bundle = join(dir, "child.mjs");
    await build({
      entryPoints: [entry],
      bundle: true,
      platform: "node",
      format: "esm",
      outfile: bundle,
      conditions: ["@remote-task/source"],
      logLevel: "silent",
    });
    child = spawn(process.execPath, [bundle, host, image, JSON.stringify(ulimits)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const instance = await new Promise<string>((resolve, reject) => {
      let out = "";
      child?.stdout?.on("data", (data: Buffer) => {
        out += data.toString();
        if (out.includes("\n")) resolve(out.trim());
      });
      child?.once("exit", (code) => reject(new Error(`child exited with ${code}`)));
    });
    const owned = `${LABELS.owner}=${instance}`;
    expect(await containersWith(owned)).toHaveLength(2);
    // The network call's relay: a child of the bridge, named by the socket directory.
    const socketDir = join(tmpdir(), `remote-task-docker-${instance}`);
    const relay = childrenOf(child.pid as number).filter((line) => line.includes(socketDir));
    expect(relay).toHaveLength(1);
    const relayPid = Number(relay[0]?.trim().split(/\s+/)[0]);
    const exited = new Promise((resolve) => child?.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
    child = undefined;
    // Nothing removed them: the bridge died without a word.
    expect(await containersWith(owned)).toHaveLength(2);
    expect(existsSync(socketDir)).toBe(true);
    // The kernel killed the relay when its parent died (it is no one's zombie for long).
    for (let i = 0; i < 100 && running(relayPid); i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    expect(running(relayPid)).toBe(false);
    const next = createDockerBackend({ image, engine: host, ulimits });
    await next.ready;
    expect(await containersWith(owned)).toEqual([]);
    expect(existsSync(socketDir)).toBe(false);
    await next.close();
  }, 60_000);
});
