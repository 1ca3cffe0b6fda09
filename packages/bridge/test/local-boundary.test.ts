import { type ChildProcess, spawn } from "node:child_process";
import {
  existsSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  symlinkSync,
  unlinkSync,
} from "node:fs";
import { chmod, mkdtemp, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { type ExecResult, execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { newInstanceName } from "../src/host/ownership.js";
import { silentLogger } from "../src/index.js";
import {
  createLocalBackend,
  DEFAULT_ETC_ENTRIES,
  DEFAULT_SANDBOX_UIDS,
  type LocalBackendOptions,
} from "../src/local/index.js";
import { sweepUidClaims, uidClaimsDir } from "../src/local/slots.js";
import { startEmbeddedBridge } from "../src/node.js";
import {
  eventually,
  expectError,
  freshId,
  leftoverCallDirs,
  makeTmpRoot,
  markedSleep,
  processesWith,
} from "./helpers.js";
import { bwrap, isolationModes } from "./isolation.js";

/** The bridge runs as root here (CI does): the boundary must hold against its own privileges. */
const root = process.getuid?.() === 0;
const MiB = 1024 * 1024;

/** A local bridge on a fresh tmpRoot; closes and checks that nothing is left. */
async function localBridge(options: LocalBackendOptions) {
  const tmpRoot = await makeTmpRoot("rt-boundary-");
  const backend = createLocalBackend({ killGraceMs: 300, tmpRoot, ...options });
  // A dropped caller stops its command at once here (no grace for a re-attach).
  const bridge = await startEmbeddedBridge({
    backend,
    logger: silentLogger,
    durable: { disconnectGraceSeconds: 0 },
  });
  const post = (body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: freshId(), ...body }),
      ...(signal ? { signal } : {}),
    });
  const run = async (command: string, extra: Record<string, unknown> = {}): Promise<ExecResult> => {
    const response = await post({ command, ...extra });
    const json: unknown = await response.json();
    expect(response.status, JSON.stringify(json)).toBe(200);
    return execResultSchema.parse(json);
  };
  const health = async () =>
    healthResponseSchema.parse(
      await (
        await fetch(`${bridge.url}/health`, {
          headers: { authorization: `Bearer ${bridge.token}` },
        })
      ).json(),
    );
  const close = async () => {
    await bridge.close();
    await backend.close();
    expect(await readdir(tmpRoot)).toEqual([]);
    await rm(tmpRoot, { recursive: true, force: true });
  };
  return { backend, bridge, post, run, health, close };
}

/** Host pid and uids (real, effective, saved, filesystem) of the `sleep` processes of a marker. */
function hostUids(marker: string): { pid: number; uids: number[] }[] {
  return processesWith(marker)
    .map((line) => line.trim().split(/\s+/))
    .filter(([, , args]) => args === "sleep")
    .map(([pid]) => {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const uids = (/^Uid:\s+(.*)$/m.exec(status)?.[1] ?? "").split(/\s+/).map(Number);
      return { pid: Number(pid), uids };
    });
}

/**
 * Starts 100 background sleeps in one call: forks beyond the process limit fail, and the call
 * still ends with nothing left running. Returns its result.
 */
async function forkBomb(host: Awaited<ReturnType<typeof localBridge>>): Promise<ExecResult> {
  const { command, marker } = markedSleep();
  const result = await host.run(
    `i=0; while [ $i -lt 100 ]; do ${command} & i=$((i+1)); done; wait`,
    { timeoutSeconds: 20 },
  );
  expect(result.code).not.toBe(0);
  expect(result.stderr).toMatch(/Cannot fork|Resource temporarily unavailable/);
  expect(processesWith(marker)).toEqual([]);
  return result;
}

describe.each(isolationModes)("sandbox boundary, $title", ({ mode, skip }) => {
  let host: Awaited<ReturnType<typeof localBridge>>;
  beforeAll(async () => {
    if (!skip) host = await localBridge({ isolation: mode });
  });
  afterAll(async () => {
    if (!skip) await host.close();
  });
  afterEach(async () => {
    if (skip) return;
    await eventually(() => host.backend.liveSandboxes() === 0, "sandboxes destroyed");
    expect(await leftoverCallDirs(host.backend)).toEqual([]);
  });

  it.skipIf(skip)(
    "the command cannot read /etc/shadow, write /proc/sys or create cgroups in the host tree",
    async () => {
      const corePattern = readFileSync("/proc/sys/kernel/core_pattern", "utf8");
      const name = `rt-escape-${process.pid}`;
      const cgroupDirs = ["pids", "memory", "unified", "."].map(
        (h) => `/sys/fs/cgroup/${h}/${name}`,
      );
      const result = await host.run(
        [
          "cat /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-refused",
          // Writes the value back unchanged: harmless if it ever succeeds, and detectable.
          `v=$(cat /proc/sys/kernel/core_pattern 2>/dev/null); (printf '%s\\n' "$v" > /proc/sys/kernel/core_pattern) 2>/dev/null && echo core_pattern-written || echo core_pattern-refused`,
          `(echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null && echo sysctl-written || echo sysctl-refused`,
          ...cgroupDirs.map(
            (dir) => `mkdir ${dir} 2>/dev/null && echo cgroup-created || echo cgroup-refused`,
          ),
          "id -u",
        ].join("; "),
      );
      const lines = result.stdout.trim().split("\n");
      expect(lines.slice(0, 3)).toEqual([
        "shadow-refused",
        "core_pattern-refused",
        "sysctl-refused",
      ]);
      expect(lines.slice(3, 3 + cgroupDirs.length)).toEqual(cgroupDirs.map(() => "cgroup-refused"));
      expect(lines.at(-1)).not.toBe("0");
      expect(readFileSync("/proc/sys/kernel/core_pattern", "utf8")).toBe(corePattern);
      for (const dir of cgroupDirs) expect(existsSync(dir)).toBe(false);
    },
  );

  it.skipIf(skip)(
    "runs every process of the command as an unprivileged host uid, a distinct one per running sandbox",
    async () => {
      const a = markedSleep();
      const b = markedSleep();
      const controller = new AbortController();
      const calls = [
        host.post({ command: `${a.command} & ${a.command}` }, controller.signal).catch(() => {}),
        host.post({ command: b.command }, controller.signal).catch(() => {}),
      ];
      let first: ReturnType<typeof hostUids>;
      let second: ReturnType<typeof hostUids>;
      try {
        await eventually(
          () => hostUids(a.marker).length === 2 && hostUids(b.marker).length === 1,
          "both sandboxes running",
        );
        first = hostUids(a.marker);
        second = hostUids(b.marker);
      } finally {
        controller.abort();
      }
      for (const { uids } of [...first, ...second]) {
        expect(uids).toHaveLength(4);
        for (const uid of uids) expect(uid).not.toBe(0);
      }
      const uidOf = (found: { uids: number[] }[]) => found[0]?.uids[0];
      expect(new Set(first.map((p) => p.uids[0])).size).toBe(1);
      if (root) {
        const { first: lowest, count } = DEFAULT_SANDBOX_UIDS;
        for (const uid of [uidOf(first), uidOf(second)]) {
          expect(uid).toBeGreaterThanOrEqual(lowest);
          expect(uid).toBeLessThan(lowest + count);
        }
        expect(uidOf(first)).not.toBe(uidOf(second));
      } else {
        expect(uidOf(first)).toBe(process.getuid?.());
      }
      await Promise.all(calls);
      await eventually(
        () => processesWith(a.marker).length + processesWith(b.marker).length === 0,
        "stopped",
      );
    },
  );

  it.skipIf(skip)(
    "says on /health who the command runs as, its limits and the teardown",
    async () => {
      const { sandbox, isolation } = await host.health();
      expect(isolation).toBe(mode);
      expect(sandbox).toMatchObject({
        user: root ? "uid-per-sandbox" : "bridge-uid",
        teardown: mode === "bwrap" ? "pid-namespace" : root ? "cgroup" : "process-group",
        memoryBytes: { max: 2048 * MiB },
        workspaceBytes: { max: 1024 * MiB, by: mode === "bwrap" ? "tmpfs" : "rlimit-fsize" },
      });
      if (root) {
        expect(sandbox?.uids).toEqual(DEFAULT_SANDBOX_UIDS);
        expect(sandbox?.processes).toEqual({
          max: 256,
          by: expect.stringMatching(/^cgroup-v[12]$/),
        });
        expect(sandbox?.memoryBytes?.by).toMatch(/^cgroup-v[12]$/);
      }
      if (mode === "bwrap") expect(sandbox?.tmpBytes).toEqual({ max: 256 * MiB, by: "tmpfs" });
    },
  );

  it.skipIf(skip)("answers 400 naming cwd for a path component or a path too long", async () => {
    for (const cwd of [`/workspace/${"a".repeat(256)}`, `/workspace${"/abc".repeat(1100)}`]) {
      const body = await expectError(await host.post({ command: "pwd", cwd }), "invalid_request");
      expect(body.issues).toEqual([
        { path: ["cwd"], message: expect.stringMatching(/longer than/) },
      ]);
    }
    // The longest component the kernel takes is checked for existence, not refused for length.
    const deep = `/workspace/${"b".repeat(255)}`;
    const body = await expectError(
      await host.post({ command: "pwd", cwd: deep }),
      "invalid_request",
    );
    expect(body.error).toContain("is not a directory in the sandbox");
  });

  if (mode === "none")
    it.skipIf(skip)(
      "the command's directories belong to its uid, and a setsid escape ends with the call",
      async () => {
        const { command, marker } = markedSleep();
        const result = await host.run(
          `stat -c %u "$HOME" "$TMPDIR" .; id -u; setsid ${command} & echo started`,
        );
        const [home, tmp, cwd, uid, started] = result.stdout.trim().split("\n");
        expect([home, tmp, cwd]).toEqual([uid, uid, uid]);
        expect(uid).not.toBe("0");
        expect(started).toBe("started");
        if (root) expect(processesWith(marker)).toEqual([]);
      },
    );

  if (mode === "bwrap")
    it.skipIf(skip)(
      "shows only the needed entries of the host's /etc, and its own passwd",
      async () => {
        const result = await host.run("ls -A /etc; echo ---; cat /etc/passwd; id");
        const [listing = "", rest = ""] = result.stdout.split("---\n");
        const entries = listing.trim().split("\n");
        for (const entry of entries)
          expect([...DEFAULT_ETC_ENTRIES, "passwd", "group"]).toContain(entry);
        expect(entries).not.toContain("shadow");
        expect(entries).toContain("passwd");
        expect(rest).toContain("sandbox:x:1000:1000:sandbox:/workspace:/bin/sh");
        expect(rest).not.toMatch(/^[a-z]+:x:[0-9]+:[0-9]+:[^\n]*\n[^\n]*daemon/m);
        expect(rest).toMatch(/uid=1000\(sandbox\) gid=1000\(sandbox\)/);
      },
    );
});

// x86-64 numbers: add_key 248, keyctl 250 (KEYCTL_SEARCH 10), io_setup 206; -4 is the user
// keyring, -3 the session keyring.
const ADD_KEYS = `perl -e 'my ($t,$n,$m,$v)=("user","rt-u","rt-s","s3cret"); print syscall(248,$t,$n,$v,6,-4) > 0 ? "added\\n" : "add: $!\\n"; syscall(248,$t,$m,$v,6,-3)'`;
const FIND_KEYS = `perl -e 'my ($t,$n,$m)=("user","rt-u","rt-s"); print syscall(250,10,-4,$t,$n,0) > 0 ? "found-u\\n" : "no-u\\n"; print syscall(250,10,-3,$t,$m,0) > 0 ? "found-s\\n" : "no-s\\n"'`;
const keyringTests = root && process.arch === "x64" && existsSync("/usr/bin/perl");

describe.skipIf(!keyringTests)(
  "kernel keyrings and AIO: nothing a call stores there reaches the next",
  () => {
    it.skipIf(!bwrap.ok)("bubblewrap: the keyring and AIO system calls do not exist", async () => {
      const host = await localBridge({ isolation: "bwrap" });
      try {
        const result = await host.run(
          `${ADD_KEYS}; perl -e 'print syscall(206, 8, 0) < 0 ? "aio: $!\\n" : "aio\\n"'`,
        );
        expect(result.stdout).toBe(
          "add: Function not implemented\naio: Function not implemented\n",
        );
      } finally {
        await host.close();
      }
    });

    it("isolation none: the next call on the same uid finds none of the keys the last one added", async () => {
      const host = await localBridge({
        isolation: "none",
        uids: { first: 1_899_000_000, count: 1 },
      });
      try {
        expect((await host.run(`${ADD_KEYS}; ${FIND_KEYS}`)).stdout).toBe(
          "added\nfound-u\nfound-s\n",
        );
        expect((await host.run(FIND_KEYS)).stdout).toBe("no-u\nno-s\n");
      } finally {
        await host.close();
      }
    });
  },
);

// x86-64 numbers: mq_open 240, mq_timedsend 242, mq_timedreceive 243, shmget 29. The queue's
// name goes to the system call without its leading slash (as the C library passes it).
const WRITE_IPC = `perl -e 'my ($name, $m) = ("rt-ipc-q", "s3cret"); my $q = syscall(240, $name, 0102, 0600, 0); print $q >= 0 && syscall(242, $q, $m, 6, 0, 0) == 0 ? "queued\\n" : "mq: $!\\n"; print syscall(29, 0x52540001, 4096, 01600) >= 0 ? "shm\\n" : "shm: $!\\n"'`;
const READ_IPC = `perl -e 'my $name = "rt-ipc-q"; my $q = syscall(240, $name, 04002, 0, 0); my $b = "\\0" x 8192; my $n = $q < 0 ? -1 : syscall(243, $q, $b, 8192, 0, 0); print $n > 0 ? "read " . substr($b, 0, $n) . "\\n" : "no queue\\n"; print syscall(29, 0x52540001, 0, 0) >= 0 ? "shm found\\n" : "no shm\\n"'`;

describe.skipIf(!keyringTests)("isolation none: IPC objects", () => {
  it("a message queue or shared memory one call made is not there for the next call on its uid", async () => {
    const host = await localBridge({ isolation: "none", uids: { first: 1_899_000_020, count: 1 } });
    try {
      expect((await host.run(`${WRITE_IPC}; ${READ_IPC}`)).stdout).toBe(
        "queued\nshm\nread s3cret\nshm found\n",
      );
      await eventually(() => host.backend.liveSandboxes() === 0, "first sandbox destroyed");
      expect((await host.run(READ_IPC)).stdout).toBe("no queue\nno shm\n");
      // Not the bridge's either.
      expect((await host.run("id -u; id -G")).stdout).toBe("1899000020\n1899000020\n");
    } finally {
      await host.close();
    }
  });
});

describe.skipIf(!root)("isolation none: what a call leaves in shared places", () => {
  it("is gone before its uid serves the next call (/tmp, /var/tmp, /dev/shm, nested too)", async () => {
    const host = await localBridge({ isolation: "none", uids: { first: 1_899_000_010, count: 1 } });
    const name = `rt-left-${process.pid}-${Date.now()}`;
    const places = ["/tmp", "/var/tmp", "/dev/shm"].map((dir) => `${dir}/${name}`);
    try {
      const first = await host.run(
        `umask 077; for f in ${places.join(" ")}; do echo secret > $f; done; mkdir -p /tmp/${name}.d/a && echo s > /tmp/${name}.d/a/b; ls ${places.join(" ")} | wc -l`,
      );
      expect(first.stdout).toBe("3\n");
      await eventually(() => host.backend.liveSandboxes() === 0, "first sandbox destroyed");
      const second = await host.run(
        `ls -d ${places.join(" ")} /tmp/${name}.d 2>/dev/null | wc -l; id -u`,
      );
      expect(second.stdout).toBe("0\n1899000010\n");
      for (const place of [...places, `/tmp/${name}.d`]) expect(existsSync(place)).toBe(false);
    } finally {
      await host.close();
    }
  });
});

describe.each(isolationModes)("per-sandbox limits, $title", ({ mode, skip }) => {
  const limits = {
    processes: 32,
    memoryBytes: 64 * MiB,
    workspaceBytes: 4 * MiB,
    tmpBytes: 2 * MiB,
    openFiles: 64,
  };
  let host: Awaited<ReturnType<typeof localBridge>>;
  beforeAll(async () => {
    if (!skip) host = await localBridge({ isolation: mode, limits });
  });
  afterAll(async () => {
    if (!skip) await host.close();
  });

  it.skipIf(skip)("reports the configured limits on /health", async () => {
    const { sandbox } = await host.health();
    expect(sandbox?.memoryBytes?.max).toBe(64 * MiB);
    expect(sandbox?.workspaceBytes?.max).toBe(4 * MiB);
    if (root) expect(sandbox?.processes?.max).toBe(32);
    if (mode === "bwrap") expect(sandbox?.tmpBytes?.max).toBe(2 * MiB);
  });

  it.skipIf(skip)(
    "the request's env cannot run code before the limits are set (BASH_ENV, SHELLOPTS)",
    async () => {
      const result = await host.run("ulimit -n; echo $BASH_ENV", {
        env: { BASH_ENV: "/dev/stdin", SHELLOPTS: "xtrace" },
        stdin: "echo sourced-early; ulimit -n 32\n",
      });
      expect(result.stdout).toBe("64\n/dev/stdin\n");
      expect(result.stderr).not.toContain("ulimit");
    },
  );

  it.skipIf(skip)("each process may open few files, and cannot raise that", async () => {
    const result = await host.run(
      "ulimit -n; ulimit -Hn; ulimit -n 65536 2>/dev/null || echo kept",
    );
    expect(result.stdout).toBe("64\n64\nkept\n");
  });

  it.skipIf(skip || !root)(
    "a command that takes more memory is killed (137) and the result says why",
    async () => {
      const result = await host.run("dd if=/dev/zero of=/dev/null bs=100M count=1");
      expect(result.code).toBe(137);
      expect(result.stderr).toContain("remote-task: the sandbox reached its memory limit (64 MiB)");
      // The next call in the same slot is not blamed for it.
      const next = await host.run("dd if=/dev/zero of=/dev/null bs=8M count=1 2>/dev/null");
      expect(next).toMatchObject({ code: 0, stderr: "" });
    },
  );

  it.skipIf(skip || !root)(
    "a fork bomb stops at the process limit, and the result says so",
    async () => {
      const result = await forkBomb(host);
      expect(result.stderr).toContain("remote-task: the sandbox reached its process limit (32");
    },
  );

  it.skipIf(skip)(
    "/workspace (and /tmp under bubblewrap) cannot grow beyond their sizes",
    async () => {
      const workspace = await host.run(
        "head -c 6M /dev/zero > big; echo $?; ls -l big | cut -d' ' -f5",
      );
      if (mode === "bwrap") {
        expect(workspace.stderr).toContain("No space left on device");
        const tmp = await host.run("head -c 3M /dev/zero > /tmp/big");
        expect(tmp.stderr).toContain("No space left on device");
        expect(tmp.code).not.toBe(0);
      } else {
        // The file size limit: SIGXFSZ (128 + 25) for the writer.
        expect(workspace.stdout.split("\n")[0]).toBe("153");
      }
      expect(Number(workspace.stdout.split("\n")[1])).toBeLessThanOrEqual(4 * MiB);
    },
  );

  it.skipIf(skip || mode !== "bwrap")(
    "/dev holds no data and /dev/shm is sized like /tmp, with or without a memory cgroup",
    async () => {
      const result = await host.run(
        "(echo x > /dev/fill) 2>&1 | grep -c 'Read-only'; head -c 3M /dev/zero > /dev/shm/big; echo $?; echo ok > /dev/null && echo null-ok",
      );
      expect(result.stdout).toBe("1\n1\nnull-ok\n");
      expect(result.stderr).toContain("No space left on device");
    },
  );
});

// Isolation none only: its slot is free again as soon as the first call ends, so the second call
// surely gets the slot whose cgroups are gone (bubblewrap's slot waits a moment for the kernel).
// The helper's placement and gate are the same for both isolations.
describe.skipIf(!root)("a sandbox that cannot be confined never runs its command", () => {
  it("isolation none: the call fails as sandbox_error and the command did not run", async () => {
    const host = await localBridge({ isolation: "none" });
    try {
      expect((await host.run("true")).code).toBe(0);
      // Once slot 0 is free again (its leftovers removed), the next call gets it.
      await eventually(() => host.backend.stats().draining === 0, "slot 0 released");
      // Take the slot's cgroups away: the next call gets that slot and cannot join them.
      const instance = host.backend.stateDir.split("remote-task-")[1] as string;
      const own = readFileSync("/proc/self/cgroup", "utf8");
      const removed: string[] = [];
      for (const controller of ["pids", "memory"]) {
        const path = new RegExp(`^\\d+:[^:]*\\b${controller}\\b[^:]*:(.*)$`, "m").exec(own)?.[1];
        const dir = join("/sys/fs/cgroup", controller, path ?? "/", "remote-task", instance, "0");
        if (!existsSync(dir)) continue;
        await eventually(() => {
          try {
            rmdirSync(dir);
            return true;
          } catch {
            return false;
          }
        }, "slot cgroup removed");
        removed.push(dir);
      }
      expect(removed.length).toBeGreaterThan(0);
      const marker = `/dev/shm/rt-unconfined-${process.pid}`;
      const body = await expectError(
        await host.post({ command: `touch ${marker}` }),
        "sandbox_error",
      );
      expect(body.error).toMatch(/Could not confine the command: cannot join its cgroup/);
      expect(existsSync(marker)).toBe(false);
    } finally {
      await host.close();
    }
  });
});

describe.skipIf(!root)("a configured uid range", () => {
  it("runs each sandbox as a uid of the range; when all are busy the call is refused as capacity_exceeded", async () => {
    const first = 1_900_500_000 + (process.pid % 1000) * 10;
    const host = await localBridge({ isolation: "none", uids: { first, count: 1 } });
    try {
      expect((await host.health()).sandbox?.uids).toEqual({ first, count: 1 });
      expect((await host.run("id -u")).stdout).toBe(`${first}\n`);
      const { command, marker } = markedSleep();
      const controller = new AbortController();
      const busy = host.post({ command }, controller.signal).catch(() => {});
      await eventually(() => processesWith(marker).length > 0, "the one uid in use");
      const refused = await host.post({ command: "true" });
      expect(refused.headers.get("retry-after")).toBe("1");
      const body = await expectError(refused, "capacity_exceeded");
      expect(body.error).toMatch(/sandbox uids are in use/);
      controller.abort();
      await busy;
    } finally {
      await host.close();
    }
  });

  it("concurrent sweeps of a dead backend's claim never kill the uid's next holder", async () => {
    const claimsDir = await makeTmpRoot("rt-claims-");
    const uid = 1_900_600_000 + (process.pid % 1000) * 10;
    const dead = "999999999.x.dead";
    const live = newInstanceName();
    try {
      for (let round = 0; round < 10; round++) {
        symlinkSync(dead, join(claimsDir, String(uid)));
        // The next holder claims the uid the moment it is released and starts a process under it.
        let holder: ChildProcess | undefined;
        const claimer = (async () => {
          for (;;) {
            try {
              symlinkSync(live, join(claimsDir, String(uid)));
              break;
            } catch {
              await new Promise((resolve) => setTimeout(resolve, 1));
            }
          }
          holder = spawn("sleep", ["30"], { uid, gid: uid, stdio: "ignore" });
          await new Promise((resolve) => holder?.once("spawn", resolve));
        })();
        await Promise.all([
          sweepUidClaims(claimsDir, newInstanceName(), 2000),
          sweepUidClaims(claimsDir, newInstanceName(), 2000),
          sweepUidClaims(claimsDir, newInstanceName(), 2000),
        ]);
        await claimer;
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(holder?.exitCode, `round ${round}: the holder's process`).toBeNull();
        expect(holder?.signalCode, `round ${round}: the holder's process`).toBeNull();
        expect(readlinkSync(join(claimsDir, String(uid))), `round ${round}: the claim`).toBe(live);
        holder?.kill("SIGKILL");
        unlinkSync(join(claimsDir, String(uid)));
      }
      expect(readdirSync(claimsDir)).toEqual([]);
    } finally {
      await rm(claimsDir, { recursive: true, force: true });
    }
  });

  it("runs its start-up trials as a uid it holds, never as one another backend's sandbox holds", async () => {
    const first = 1_900_700_000 + (process.pid % 1000) * 10;
    // Another backend holds `first` and tears its sandbox down as that uid, again and again.
    const holderClaim = join(uidClaimsDir(), String(first));
    symlinkSync(newInstanceName(), holderClaim);
    const teardown = spawn("/bin/sh", ["-c", "while :; do kill -KILL -1 2>/dev/null; done"], {
      uid: first,
      gid: first,
      stdio: "ignore",
    });
    try {
      for (let round = 0; round < 5; round++) {
        const backend = createLocalBackend({
          isolation: bwrap.ok ? "bwrap" : "none",
          uids: { first, count: 2 },
        });
        await backend.close();
      }
      expect(teardown.exitCode).toBeNull();
    } finally {
      teardown.kill("SIGKILL");
      unlinkSync(holderClaim);
    }
  });

  it("refuses a range that includes privileged or reserved uids", () => {
    for (const uids of [
      { first: 0, count: 10 },
      { first: 65_000, count: 1000 },
      { first: 4_294_967_290, count: 10 },
    ])
      expect(() => createLocalBackend({ isolation: "none", uids })).toThrow(TypeError);
  });
});

it("two copies of the local backend module in one process (ESM and CommonJS, say) each make their own", async () => {
  vi.resetModules();
  const other = await import("../src/local/index.js");
  const first = createLocalBackend({ isolation: "none" });
  const second = other.createLocalBackend({ isolation: "none" });
  try {
    expect(other.createLocalBackend).not.toBe(createLocalBackend);
    expect(second.stateDir).not.toBe(first.stateDir);
  } finally {
    await first.close();
    await second.close();
  }
});

describe.skipIf(!existsSync("/dev/shm"))(
  "on a tmpfs tmpRoot (the default where /dev/shm is one)",
  () => {
    it("removes an empty call directory at once and a full one too", async () => {
      const tmpRoot = await mkdtemp(join("/dev/shm", "rt-tmpfs-test-"));
      await chmod(tmpRoot, 0o711);
      const backend = createLocalBackend({ isolation: "none", tmpRoot });
      const bridge = await startEmbeddedBridge({ backend, logger: silentLogger });
      try {
        for (const command of [
          "true",
          "echo x > f; mkdir -p a/b; chmod 000 a; echo y > $TMPDIR/t",
        ]) {
          const response = await fetch(`${bridge.url}/exec`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${bridge.token}`,
              "content-type": "application/json",
            },
            body: JSON.stringify({ sandboxId: freshId(), command }),
          });
          expect(execResultSchema.parse(await response.json()).code).toBe(0);
          expect(await leftoverCallDirs(backend)).toEqual([]);
        }
      } finally {
        await bridge.close();
        await backend.close();
        expect(await readdir(tmpRoot)).toEqual([]);
        await rm(tmpRoot, { recursive: true, force: true });
      }
    });
  },
);

describe("without cgroups (cgroups: false): the documented fallback", () => {
  let host: Awaited<ReturnType<typeof localBridge>>;
  beforeAll(async () => {
    host = await localBridge({
      isolation: "none",
      cgroups: false,
      limits: { processes: 32, memoryBytes: 64 * MiB, workspaceBytes: 4 * MiB },
    });
  });
  afterAll(async () => {
    await host.close();
  });

  it("reports rlimits and the uid (root) or process-group teardown on /health", async () => {
    const { sandbox } = await host.health();
    expect(sandbox).toMatchObject({
      memoryBytes: { max: 64 * MiB, by: "rlimit-data" },
      teardown: root ? "uid" : "process-group",
    });
    if (root) expect(sandbox?.processes).toEqual({ max: 32, by: "rlimit-nproc" });
    else expect(sandbox?.processes).toBeUndefined();
  });

  it("limits each process's data size", async () => {
    const result = await host.run("dd if=/dev/zero of=/dev/null bs=100M count=1");
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("memory exhausted");
  });

  it.skipIf(!root)("limits the processes of the sandbox's uid", async () => {
    await forkBomb(host);
  });

  it.skipIf(!root)(
    "a setsid escape still ends with the call: every process of the uid is killed",
    async () => {
      const { command, marker } = markedSleep();
      const result = await host.run(`setsid ${command} & echo started`);
      expect(result.stdout).toBe("started\n");
      expect(processesWith(marker)).toEqual([]);
    },
  );
});
