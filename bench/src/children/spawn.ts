// The baselines of the `sandbox` item, in a process of their own like the bridge: a bare spawn of
// the command (`sh -c`, or bubblewrap with the local backend's own flags), and the local backend
// driven directly (start, read, exit, destroy) without HTTP.
import { spawn } from "node:child_process";
import { chmodSync, closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createLocalBackend,
  DEFAULT_ETC_ENTRIES,
  DEFAULT_SANDBOX_LIMITS,
  DEFAULT_SANDBOX_UIDS,
  type LocalBackend,
} from "@remote-task/bridge/local";
import { SANDBOX_WORKSPACE } from "../../../packages/bridge/src/host/workspace.ts";
// The backend's own bubblewrap flags, so the bare side runs the very same sandbox.
import {
  bwrapArgs,
  bwrapBaseArgs,
  SANDBOX_GROUP,
  SANDBOX_PASSWD,
} from "../../../packages/bridge/src/local/bwrap.ts";
import { sandboxSeccompFilter } from "../../../packages/bridge/src/local/seccomp.ts";
import { findShell } from "../../../packages/bridge/src/local/shell.ts";
import { serveRpc } from "../lib/proc.ts";

type Isolation = "none" | "bwrap";
interface Params {
  isolation: Isolation;
  command: string;
}
interface BatchParams extends Params {
  count: number;
  concurrency: number;
}

const root = process.getuid?.() === 0;
/** The bare side runs as an unprivileged uid too when root (the last of the sandbox range). */
const uid = root ? DEFAULT_SANDBOX_UIDS.first + DEFAULT_SANDBOX_UIDS.count - 1 : undefined;
const files = mkdtempSync(join(tmpdir(), "rt-bench-bare-"));
chmodSync(files, 0o711);
writeFileSync(join(files, "passwd"), SANDBOX_PASSWD, { mode: 0o644 });
writeFileSync(join(files, "group"), SANDBOX_GROUP, { mode: 0o644 });
process.on("exit", () => rmSync(files, { recursive: true, force: true }));

const ENV = { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" };

/** bubblewrap with the flags the local backend gives a sandbox (default limits, /workspace cwd). */
const bareBwrapBase = bwrapBaseArgs({
  workspaceBytes: DEFAULT_SANDBOX_LIMITS.workspaceBytes,
  tmpBytes: DEFAULT_SANDBOX_LIMITS.tmpBytes,
  passwdFile: join(files, "passwd"),
  groupFile: join(files, "group"),
  etcEntries: DEFAULT_ETC_ENTRIES,
});

/** The backend's shell (bash where there is one) and its seccomp filter, as the backend uses them. */
const SHELL = findShell();
const seccompFile = join(files, "seccomp.bpf");
const seccomp = sandboxSeccompFilter();
if (seccomp !== undefined) writeFileSync(seccompFile, seccomp);
const SECCOMP_FD = 3;

function bareBwrapArgs(command: string): string[] {
  return [
    ...bwrapArgs(bareBwrapBase, {
      cwd: SANDBOX_WORKSPACE,
      ...(seccomp === undefined ? {} : { seccompFd: SECCOMP_FD }),
    }),
    "--clearenv",
    ...Object.entries(ENV).flatMap(([name, value]) => ["--setenv", name, value]),
    "--",
    SHELL.path,
    ...SHELL.args,
    command,
  ];
}

/** One bare spawn: from spawn until the output is closed and the exit seen. */
function bare({ isolation, command }: Params): Promise<number> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    // bwrap reads the filter to its end from the descriptor: each spawn opens the file afresh.
    const filterFd =
      isolation === "bwrap" && seccomp !== undefined ? openSync(seccompFile, "r") : undefined;
    const child =
      isolation === "bwrap"
        ? spawn("bwrap", bareBwrapArgs(command), {
            stdio: ["ignore", "pipe", "pipe", ...(filterFd === undefined ? [] : [filterFd])],
            env: ENV,
            detached: true,
            ...(uid === undefined ? {} : { uid, gid: uid }),
          })
        : spawn(SHELL.path, [...SHELL.args, command], {
            stdio: ["ignore", "pipe", "pipe"],
            env: ENV,
            detached: true,
            ...(uid === undefined ? {} : { uid, gid: uid }),
          });
    if (filterFd !== undefined) closeSync(filterFd);
    child.stdout?.on("data", () => {});
    child.stderr?.on("data", () => {});
    child.once("error", reject);
    child.once("close", (code) => {
      if (code !== 0) reject(new Error(`bare ${isolation} command exited ${code}`));
      else resolve(performance.now() - started);
    });
  });
}

const backends = new Map<Isolation, LocalBackend>();
let calls = 0;

/** One call on the local backend itself: start, read the output, exit, destroy. */
async function direct({ isolation, command }: Params): Promise<number> {
  let backend = backends.get(isolation);
  if (backend === undefined) {
    backend = createLocalBackend({ isolation });
    backends.set(isolation, backend);
  }
  const sandboxId = `bench-direct-${++calls}`;
  const started = performance.now();
  const running = await backend.start({
    sandboxId,
    command,
    cwd: SANDBOX_WORKSPACE,
    env: {},
    timeoutMs: 60_000,
    signal: new AbortController().signal,
  });
  for await (const _ of running.output) {
    // discarded
  }
  const code = await running.exit;
  await backend.destroy(sandboxId);
  if (code !== 0) throw new Error(`direct ${isolation} command exited ${code}`);
  return performance.now() - started;
}

/** `count` bare spawns, `concurrency` at a time; resolves with the total wall time in ms. */
async function bareBatch({ count, concurrency, ...params }: BatchParams): Promise<number> {
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next++;
      await bare(params);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return performance.now() - started;
}

serveRpc({
  bare: (params: Params) => bare(params),
  direct: (params: Params) => direct(params),
  bareBatch: (params: BatchParams) => bareBatch(params),
});
process.on("SIGTERM", () => {
  void Promise.all([...backends.values()].map((b) => b.close())).then(() => process.exit(0));
});
