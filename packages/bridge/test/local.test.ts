import { existsSync } from "node:fs";
import { readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type ExecResult, execResultSchema } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { silentLogger } from "../src/index.js";
import {
  createLocalBackend,
  IsolationUnavailableError,
  isolationNoneGaps,
  type LocalBackend,
} from "../src/local/index.js";
import { type EmbeddedBridge, startEmbeddedBridge } from "../src/node.js";
import {
  eventually,
  expectError,
  freshId,
  leftoverCallDirs,
  makeTmpRoot,
  markedSleep,
  memoryLogger,
  processesWith,
} from "./helpers.js";
import { bwrap, bwrapRequired, isolationModes } from "./isolation.js";

it("bubblewrap works here whenever REMOTE_TASK_REQUIRE_BWRAP=1", () => {
  if (bwrapRequired) expect(bwrap.reason).toBe("");
  expect(typeof bwrap.ok).toBe("boolean");
});

describe("isolation option", () => {
  it("fails clearly at creation when bwrap is requested but unusable", () => {
    let thrown: unknown;
    try {
      createLocalBackend({ isolation: "bwrap", bwrapPath: "/nonexistent/bwrap" });
    } catch (error) {
      thrown = error;
    }
    expect(IsolationUnavailableError.isInstance(thrown)).toBe(true);
    expect(String((thrown as Error).message)).toMatch(/not installed.*apt-get install bubblewrap/);
  });

  it("auto falls back to none when bwrap is unusable, and reports it", () => {
    expect(
      createLocalBackend({ isolation: "auto", bwrapPath: "/nonexistent/bwrap" }).isolation,
    ).toBe("none");
    expect(createLocalBackend({ isolation: "none" }).isolation).toBe("none");
  });

  it("auto warns on stderr when it falls back to none", () => {
    const warn = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    try {
      const backend = createLocalBackend({ isolation: "auto", bwrapPath: "/nonexistent/bwrap" });
      expect(backend.isolation).toBe("none");
      const lines = warn.mock.calls.map(([text]) => String(text));
      expect(lines).toContainEqual(
        expect.stringMatching(
          /^remote-task: warning: bubblewrap is not usable here .*isolation "none"/,
        ),
      );
      void backend.close();
    } finally {
      warn.mockRestore();
    }
  });

  it("says what isolation none does not protect, as a program that chose it should print", () => {
    const asRoot = isolationNoneGaps(true).join("\n");
    const asUser = isolationNoneGaps(false).join("\n");
    expect(asRoot).toMatch(/whole file system.*no network policy/);
    expect(asRoot).toMatch(/\/tmp, \/var\/tmp, \/dev\/shm.*removed.*keyrings/);
    expect(asUser).toMatch(/the bridge's own uid/);
    expect(asRoot).toMatch(/IPC objects of its own/);
    expect(asUser).not.toMatch(/keyrings/);
  });

  it("sends its warnings to the logger it is given, not to stderr", async () => {
    const warn = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    const logger = memoryLogger();
    try {
      const backend = createLocalBackend({
        isolation: "auto",
        bwrapPath: "/nonexistent/bwrap",
        logger,
      });
      await backend.close();
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
    expect(logger.entries).toEqual([
      {
        event: "warning",
        level: "warn",
        detail: expect.stringMatching(/^bubblewrap is not usable here .*isolation "none"/),
      },
    ]);
  });

  it.skipIf(!bwrap.ok || process.getuid?.() !== 0)(
    "bwrap refuses to start when bubblewrap works only as root (no unprivileged user namespaces)",
    async () => {
      // A bubblewrap that behaves like one on a host without unprivileged user namespaces: it
      // would run as root (where the command would be host root) but fails as any other uid.
      const dir = await makeTmpRoot("rt-fake-bwrap-");
      const fake = join(dir, "bwrap");
      await writeFile(
        fake,
        '#!/bin/sh\n[ "$(id -u)" = 0 ] && exec bwrap "$@"\necho "bwrap: setting up uid map: Permission denied" >&2\nexit 1\n',
        { mode: 0o755 },
      );
      try {
        let thrown: unknown;
        try {
          createLocalBackend({ isolation: "bwrap", bwrapPath: fake });
        } catch (error) {
          thrown = error;
        }
        expect(IsolationUnavailableError.isInstance(thrown)).toBe(true);
        expect((thrown as IsolationUnavailableError).reason).toMatch(
          /failed a trial run as uid \d+ .*uid map: Permission denied/,
        );
        const warn = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
        try {
          const auto = createLocalBackend({ isolation: "auto", bwrapPath: fake });
          expect(auto.isolation).toBe("none");
          expect(auto.sandbox.user).toBe("uid-per-sandbox");
          await auto.close();
        } finally {
          warn.mockRestore();
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  );

  it.skipIf(!bwrap.ok)("auto uses bwrap when it works", () => {
    expect(createLocalBackend({ isolation: "auto" }).isolation).toBe("bwrap");
  });
});

/**
 * In the calling describe: a local backend in `mode` behind an embedded bridge, with a secret in
 * the host's environment; after each test no sandbox or call directory is left, after all nothing.
 */
function useLocalBridge(mode: "none" | "bwrap", skip: boolean) {
  const fx = {} as { tmpRoot: string; backend: LocalBackend; bridge: EmbeddedBridge<LocalBackend> };
  const secret = `host-secret-${Math.random().toString(36).slice(2)}`;

  beforeAll(async () => {
    if (skip) return;
    process.env.REMOTE_TASK_TEST_HOST_SECRET = secret;
    fx.tmpRoot = await makeTmpRoot("rt-local-test-");
    fx.backend = createLocalBackend({ isolation: mode, tmpRoot: fx.tmpRoot, killGraceMs: 300 });
    // No grace for a caller that left: the tests below expect its command killed at once.
    fx.bridge = await startEmbeddedBridge({
      backend: fx.backend,
      logger: silentLogger,
      durable: { disconnectGraceSeconds: 0 },
    });
  });
  afterAll(async () => {
    if (skip) return;
    delete process.env.REMOTE_TASK_TEST_HOST_SECRET;
    await fx.bridge.close();
    await fx.backend.close();
    // Closed, the backend leaves nothing behind in its tmpRoot.
    expect(await readdir(fx.tmpRoot)).toEqual([]);
    await rm(fx.tmpRoot, { recursive: true, force: true });
  });
  afterEach(async () => {
    if (skip) return;
    expect(fx.backend.liveSandboxes()).toBe(0);
    expect(await leftoverCallDirs(fx.backend)).toEqual([]);
  });

  const post = (body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${fx.bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.bridge.token}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: freshId(), ...body }),
      ...(signal ? { signal } : {}),
    });
  const run = async (body: Record<string, unknown>): Promise<ExecResult> => {
    const response = await post(body);
    const json: unknown = await response.json();
    expect(response.status, JSON.stringify(json)).toBe(200);
    return execResultSchema.parse(json);
  };
  return { fx, secret, post, run };
}

describe.each(isolationModes)("local backend, $title", ({ mode, skip }) => {
  const { fx, secret, post, run } = useLocalBridge(mode, skip);

  it.skipIf(skip)("reports the isolation in force on /health", async () => {
    const health = await fetch(`${fx.bridge.url}/health`, {
      headers: { authorization: `Bearer ${fx.bridge.token}` },
    });
    expect(await health.json()).toMatchObject({ backend: "local", isolation: mode });
  });

  it.skipIf(skip)("gives the command a scrubbed environment plus the request env", async () => {
    const result = await run({ command: "env", env: { GREETING: "hello there" } });
    expect(result.stdout).not.toContain(secret);
    expect(result.stdout).not.toContain("REMOTE_TASK_TEST_HOST_SECRET");
    const env = Object.fromEntries(
      result.stdout
        .trim()
        .split("\n")
        .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
    );
    expect(env.GREETING, JSON.stringify(result)).toBe("hello there");
    expect(env.LANG).toBe("C.UTF-8");
    expect(env.PATH).toContain("/usr/bin");
    if (mode === "bwrap") {
      expect(env.HOME).toBe("/workspace");
      expect(env.TMPDIR).toBe("/tmp");
    } else {
      expect(env.HOME?.startsWith(fx.tmpRoot)).toBe(true);
      expect(env.TMPDIR?.startsWith(fx.tmpRoot)).toBe(true);
    }
    const names = Object.keys(env).filter(
      (name) => !["PWD", "SHLVL", "_", "OLDPWD"].includes(name),
    );
    expect(names.sort()).toEqual(["GREETING", "HOME", "LANG", "PATH", "TMPDIR"]);
  });

  it.skipIf(skip)(
    "keeps env values off the host's process list and out of the host-side bwrap",
    async () => {
      const value = `env-secret-${Math.random().toString(36).slice(2)}`;
      const { command, marker } = markedSleep();
      const controller = new AbortController();
      const pending = post({ command, env: { SECRET: value } }, controller.signal).catch(() => {});
      await eventually(() => processesWith(marker).length > 0, "command running");
      expect(processesWith(value)).toEqual([]);
      controller.abort();
      await pending;
      await eventually(() => fx.backend.liveSandboxes() === 0, "destroyed");
      // A loader variable in the request env must affect only the sandboxed command.
      const preload = await run({
        command: ":",
        env: { LD_PRELOAD: "/nonexistent/rt-preload.so" },
      });
      const warnings = preload.stderr.split("\n").filter((line) => line.includes("rt-preload.so"));
      expect(warnings).toHaveLength(1);
    },
  );

  it.skipIf(skip)("refuses NUL characters in env values with the failing path", async () => {
    const body = await expectError(
      await post({ command: "true", env: { BAD: "a\u0000b" } }),
      "invalid_request",
    );
    expect(body.issues).toEqual([{ path: ["env", "BAD"], message: expect.any(String) }]);
    expect(JSON.stringify(body)).not.toContain("a\\u0000b");
  });

  it.skipIf(skip)("runs each call in a fresh directory that is removed afterwards", async () => {
    const first = await run({ command: "echo data > file.txt; mkdir -p d/e; chmod 000 d; ls" });
    expect(first.stdout).toBe("d\nfile.txt\n");
    const second = await run({ command: "ls -A; echo done" });
    expect(second.stdout).toBe("done\n");
  });

  it.skipIf(skip)("refuses a cwd the sandbox does not have, and creates nothing", async () => {
    for (const cwd of ["/workspace/sub/dir/", ...(mode === "bwrap" ? ["/tmp/a/b", "/nope"] : [])]) {
      const body = await expectError(await post({ command: "pwd", cwd }), "invalid_request");
      expect(body.issues).toEqual([
        { path: ["cwd"], message: expect.stringContaining("is not a directory in the sandbox") },
      ]);
    }
    expect((await run({ command: "pwd", cwd: "/workspace/" })).stdout).toMatch(/\/workspace\n$/);
  });
});

describe.each(isolationModes)("local backend, $title: cwd and processes", ({ mode, skip }) => {
  const { fx, post, run } = useLocalBridge(mode, skip);

  if (mode === "none")
    it.skipIf(skip)("refuses a cwd outside /workspace without isolation", async () => {
      for (const cwd of ["/etc", "/workspace/../etc", "/workspacex", "/tmp"]) {
        const body = await expectError(await post({ command: "pwd", cwd }), "invalid_request");
        expect(body.issues).toEqual([
          { path: ["cwd"], message: expect.stringContaining("/workspace") },
        ]);
      }
    });

  if (mode === "bwrap")
    it.skipIf(skip)("takes any directory the sandbox has as cwd under bubblewrap", async () => {
      expect((await run({ command: "pwd", cwd: "/etc" })).stdout).toBe("/etc\n");
      expect((await run({ command: "pwd", cwd: "/usr/bin/" })).stdout).toBe("/usr/bin\n");
      expect((await run({ command: "pwd; touch x; ls", cwd: "/tmp" })).stdout).toBe("/tmp\nx\n");
      expect((await run({ command: "pwd", cwd: "/workspace" })).stdout).toBe("/workspace\n");
    });

  if (mode === "bwrap")
    it.skipIf(skip)(
      "isolates: no network, read-only system, private /tmp, own PID namespace",
      async () => {
        const name = `rt-private-${Math.random().toString(36).slice(2)}`;
        const result = await run({
          command: [
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
            "touch /usr/rt-write-test 2>/dev/null && echo usr-writable || echo usr-readonly",
            "touch /etc/rt-write-test 2>/dev/null && echo etc-writable || echo etc-readonly",
            `echo x > /tmp/${name} && echo tmp-writable`,
            "ls /proc | grep -c '^[0-9][0-9]*$'",
          ].join("; "),
        });
        const lines = result.stdout.trim().split("\n");
        expect(lines.slice(0, 4)).toEqual(["lo", "usr-readonly", "etc-readonly", "tmp-writable"]);
        expect(Number(lines[4])).toBeLessThan(10);
        expect(existsSync(join("/tmp", name))).toBe(false);
      },
    );

  it.skipIf(skip)("kills the whole process group on timeout: no grandchild survives", async () => {
    const { command, marker } = markedSleep();
    const result = await run({ command: `${command} & ${command}`, timeoutSeconds: 0.5 });
    expect(result).toMatchObject({ outcome: "timeout", code: 124 });
    await eventually(() => processesWith(marker).length === 0, "no sleep left", 5_000);
  });

  it.skipIf(skip)("kills a command that ignores SIGTERM after the grace period", async () => {
    const { command, marker } = markedSleep();
    const result = await run({ command: `trap '' TERM; ${command}`, timeoutSeconds: 0.3 });
    expect(result.outcome).toBe("timeout");
    expect(processesWith(marker)).toEqual([]);
  });

  it.skipIf(skip)(
    "ends the call when the command exits, killing what it left in the background",
    async () => {
      // The background sleep lasts 1000 s: a call that waited for it would never answer here.
      const { command, marker } = markedSleep();
      const result = await run({ command: `${command} & echo started` });
      expect(result).toMatchObject({ stdout: "started\n", code: 0, outcome: "exited" });
      expect(processesWith(marker)).toEqual([]);
    },
  );

  it.skipIf(skip)("kills the command when the client disconnects mid-stream", async () => {
    const { command, marker } = markedSleep();
    const controller = new AbortController();
    const response = await fetch(`${fx.bridge.url}/exec`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${fx.bridge.token}`,
        "content-type": "application/json",
        accept: "text/event-stream",
      },
      body: JSON.stringify({ sandboxId: freshId(), command: `echo ready; ${command}` }),
      signal: controller.signal,
    });
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    while (!seen.includes("ready")) seen += (await reader.read()).value ?? "";
    expect(processesWith(marker).length).toBeGreaterThan(0);
    controller.abort();
    await eventually(() => fx.backend.liveSandboxes() === 0, "sandbox destroyed after disconnect");
    await eventually(() => processesWith(marker).length === 0, "command killed after disconnect");
  });

  it.skipIf(skip)("reports exit statuses like a shell, including death by signal", async () => {
    expect((await run({ command: "exit 7" })).code).toBe(7);
    expect((await run({ command: "kill -9 $$" })).code).toBe(137);
  });
});
