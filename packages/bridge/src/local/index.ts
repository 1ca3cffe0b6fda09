import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { constants, tmpdir } from "node:os";
import { join, posix } from "node:path";
import type { Writable } from "node:stream";
import { hasBrand } from "@remote-task/internal";
import {
  BackendError,
  type ExecSpec,
  type RunningCommand,
  type SandboxBackend,
} from "../backend.js";
import { bwrapArgs, isUnderSystemDir, probeBwrap, SANDBOX_WORKSPACE } from "./bwrap.js";
import { mergeOutput } from "./output.js";

export type LocalIsolationOption = "auto" | "bwrap" | "none";
export type LocalIsolation = "bwrap" | "none";

export interface LocalBackendOptions {
  /** `auto` (default) uses bubblewrap when a trial run works, else none; `bwrap` requires it. */
  isolation?: LocalIsolationOption | undefined;
  /** Parent of the per-call temporary directories (default: the OS temp directory). */
  tmpRoot?: string | undefined;
  /** Time between SIGTERM and SIGKILL when a command is stopped (default 2000 ms). */
  killGraceMs?: number | undefined;
  /** bubblewrap binary (default `bwrap` on PATH). */
  bwrapPath?: string | undefined;
}

export interface LocalBackendStats {
  /** Sandboxes started and not yet destroyed. */
  live: number;
  started: number;
  destroyed: number;
}

/** The local backend: a process per call in a fresh temporary directory. */
export interface LocalBackend extends SandboxBackend {
  readonly name: "local";
  readonly isolation: LocalIsolation;
  /** Sandboxes started and not yet destroyed (0 after every call has ended). */
  liveSandboxes(): number;
  stats(): LocalBackendStats;
}

/** Thrown by {@link createLocalBackend} when `isolation: "bwrap"` cannot be honoured. */
export class IsolationUnavailableError extends Error {
  static readonly brand: unique symbol = Symbol.for("remote-task.IsolationUnavailableError");
  override readonly name = "IsolationUnavailableError";

  constructor(readonly reason: string) {
    super(
      `bubblewrap isolation was requested but cannot be used here: ${reason}. Install bubblewrap, allow user namespaces, or choose isolation "none".`,
    );
    Object.defineProperty(this, IsolationUnavailableError.brand, { value: true });
  }

  static isInstance(value: unknown): value is IsolationUnavailableError {
    return hasBrand(value, IsolationUnavailableError.brand);
  }
}

const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const DEFAULT_KILL_GRACE_MS = 2_000;
/** After the command exits, how long leftover writers may keep its pipes open. */
const PIPE_DRAIN_MS = 1_000;
/** How long after SIGKILL the last member of a process group may take to disappear. */
const GROUP_EXIT_WAIT_MS = 2_000;

interface Sandbox {
  root?: string;
  child?: ChildProcess;
  /** Resolves once the child has exited (immediately when none was spawned). */
  exited: Promise<void>;
  startup: Promise<unknown>;
  destroying?: Promise<void>;
}

/** The `/bin/sh` exit status: the code, or 128 + signal number when killed by a signal. */
function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal === null ? undefined : constants.signals[signal];
  return 128 + (number ?? 0);
}

function killGroup(target: ChildProcess | number, signal: NodeJS.Signals): void {
  const pgid = typeof target === "number" ? target : target.pid;
  if (pgid === undefined) return;
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is already gone
  }
}

/**
 * Whether a process of the group is still running. Zombies do not count: they are dead and wait
 * for whoever reaps orphans here, which may take a while.
 */
function groupAlive(pgid: number): boolean {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return signalGroup(pgid);
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1");
    } catch {
      continue;
    }
    // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") return true;
  }
  return false;
}

function signalGroup(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until no process of the group is left (SIGKILL is asynchronous), within `limitMs`. */
async function groupGone(pgid: number, limitMs: number): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (groupAlive(pgid) && Date.now() < deadline) {
    killGroup(pgid, "SIGKILL");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Removes a directory tree, first making it writable if the command locked parts of it. */
async function removeTree(dir: string): Promise<void> {
  try {
    await rm(dir, { recursive: true, force: true });
  } catch {
    const unlock = async (path: string): Promise<void> => {
      await chmod(path, 0o700).catch(() => {});
      const entries = await readdir(path, { withFileTypes: true }).catch(() => []);
      for (const entry of entries) if (entry.isDirectory()) await unlock(join(path, entry.name));
    };
    await unlock(dir);
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Maps a request cwd into the sandbox: `/workspace` and below map into the temp directory;
 * with bubblewrap any other absolute path is real inside the sandbox.
 */
function resolveCwd(
  cwd: string,
  isolation: LocalIsolation,
): { inside: string; workspaceRelative?: string } {
  const normal = posix.normalize(cwd).replace(/(.)\/+$/, "$1");
  if (normal === SANDBOX_WORKSPACE || normal.startsWith(`${SANDBOX_WORKSPACE}/`)) {
    return { inside: normal, workspaceRelative: normal.slice(SANDBOX_WORKSPACE.length + 1) };
  }
  if (isolation === "bwrap") return { inside: normal };
  throw new BackendError(
    "invalid_request",
    `cwd must be ${SANDBOX_WORKSPACE} or a path under it: this bridge runs commands without bubblewrap isolation, where other directories are not part of the sandbox.`,
    { path: ["cwd"] },
  );
}

/**
 * A process receives its command, directory and environment as C strings, where NUL cannot
 * pass; refuse such a request as the caller's mistake before spawn throws a message that quotes
 * the value (an env value may be a secret).
 */
function refuseNul(spec: ExecSpec): void {
  const fields: [ReadonlyArray<string>, string][] = [
    [["command"], spec.command],
    [["cwd"], spec.cwd],
    ...Object.entries(spec.env).map(([name, value]): [string[], string] => [["env", name], value]),
  ];
  for (const [path, value] of fields) {
    if (value.includes("\0")) {
      throw new BackendError(
        "invalid_request",
        `${path.join(".")} contains a NUL character, which a process cannot receive; remove it.`,
        { path },
      );
    }
  }
}

/**
 * Creates the local backend. With `isolation: "auto"` bubblewrap is probed once (a real trial
 * run) and used when it works; `"bwrap"` throws {@link IsolationUnavailableError} when it does not.
 */
export function createLocalBackend(options: LocalBackendOptions = {}): LocalBackend {
  const tmpRoot = options.tmpRoot ?? tmpdir();
  const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
  const bwrapPath = options.bwrapPath ?? "bwrap";
  const requested = options.isolation ?? "auto";
  let isolation: LocalIsolation = "none";
  if (requested !== "none") {
    const probeDir = mkdtempSync(join(tmpRoot, "remote-task-probe-"));
    let probe: ReturnType<typeof probeBwrap>;
    try {
      probe = probeBwrap(bwrapPath, probeDir);
    } finally {
      rmSync(probeDir, { recursive: true, force: true });
    }
    if (probe.ok) isolation = "bwrap";
    else if (requested === "bwrap") throw new IsolationUnavailableError(probe.reason ?? "unknown");
  }

  const sandboxes = new Map<string, Sandbox>();
  let started = 0;
  let destroyed = 0;

  async function prepare(spec: ExecSpec, sandbox: Sandbox): Promise<RunningCommand> {
    refuseNul(spec);
    const cwd = resolveCwd(spec.cwd, isolation);
    const root = await mkdtemp(join(tmpRoot, "remote-task-"));
    sandbox.root = root;
    const workspace = join(root, "workspace");
    const tmp = join(root, "tmp");
    await mkdir(workspace);
    await mkdir(tmp);
    const hostCwd =
      cwd.workspaceRelative === undefined ? workspace : join(workspace, cwd.workspaceRelative);
    if (cwd.workspaceRelative) await mkdir(hostCwd, { recursive: true });
    if (spec.signal.aborted)
      throw new BackendError("sandbox_error", "The call ended before the command started.");

    const bwrap = isolation === "bwrap";
    const env: Record<string, string> = {
      PATH: SANDBOX_PATH,
      HOME: bwrap ? SANDBOX_WORKSPACE : workspace,
      LANG: "C.UTF-8",
      TMPDIR: bwrap ? "/tmp" : tmp,
      ...spec.env,
    };
    const extraDirs =
      bwrap && cwd.workspaceRelative === undefined && !isUnderSystemDir(cwd.inside)
        ? [cwd.inside]
        : [];
    // With bubblewrap, the request's env reaches only the sandboxed command: bwrap itself runs
    // on the host with a bare PATH (a request's LD_PRELOAD must not load into it), and the
    // variables travel through a pipe (--args 3), not the command line that `ps` shows.
    const child = bwrap
      ? spawn(
          bwrapPath,
          [
            "--args",
            "3",
            ...bwrapArgs(workspace, cwd.inside, extraDirs),
            "--",
            "/bin/sh",
            "-c",
            spec.command,
          ],
          {
            cwd: workspace,
            env: { PATH: SANDBOX_PATH },
            detached: true,
            stdio: ["ignore", "pipe", "pipe", "pipe"],
          },
        )
      : spawn("/bin/sh", ["-c", spec.command], {
          cwd: hostCwd,
          env,
          detached: true,
          stdio: ["ignore", "pipe", "pipe"],
        });
    if (bwrap) {
      const settings = ["--clearenv"];
      for (const [name, value] of Object.entries(env)) settings.push("--setenv", name, value);
      const channel = child.stdio[3] as Writable | null;
      channel?.on("error", () => {});
      channel?.end(`${settings.join("\0")}\0`);
    }
    sandbox.child = child;

    const exit = new Promise<number>((resolve, reject) => {
      child.once("error", (error) =>
        reject(new BackendError("sandbox_error", `Could not start the command: ${error.message}`)),
      );
      child.once("exit", (code, signal) => {
        // Background processes the command left behind must not outlive it (or hold its pipes).
        killGroup(child, "SIGKILL");
        const drain = setTimeout(() => {
          child.stdout?.destroy();
          child.stderr?.destroy();
        }, PIPE_DRAIN_MS);
        drain.unref();
        child.once("close", () => clearTimeout(drain));
        resolve(exitStatus(code, signal));
      });
    });
    sandbox.exited = exit.then(
      () => {},
      () => {},
    );
    const stop = () => void terminate(sandbox);
    if (spec.signal.aborted) stop();
    else spec.signal.addEventListener("abort", stop, { once: true });

    if (child.stdout === null || child.stderr === null) {
      throw new BackendError("sandbox_error", "The command's output pipes could not be opened.");
    }
    return { output: mergeOutput(child.stdout, child.stderr), exit };
  }

  /** SIGTERM to the whole process group, SIGKILL after the grace period; resolves on exit. */
  async function terminate(sandbox: Sandbox): Promise<void> {
    const child = sandbox.child;
    if (child === undefined) return;
    if (child.exitCode === null && child.signalCode === null) {
      killGroup(child, "SIGTERM");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const graceOver = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, killGraceMs);
      });
      await Promise.race([sandbox.exited, graceOver]);
      clearTimeout(timer);
    }
    killGroup(child, "SIGKILL");
    await sandbox.exited;
    if (child.pid !== undefined) await groupGone(child.pid, killGraceMs + GROUP_EXIT_WAIT_MS);
  }

  return {
    name: "local",
    isolation,

    async start(spec) {
      if (sandboxes.has(spec.sandboxId)) {
        throw new BackendError(
          "sandbox_error",
          `Sandbox ${spec.sandboxId} already exists on this bridge; use a fresh sandbox id.`,
        );
      }
      const sandbox: Sandbox = { exited: Promise.resolve(), startup: Promise.resolve() };
      sandboxes.set(spec.sandboxId, sandbox);
      started++;
      const running = prepare(spec, sandbox);
      sandbox.startup = running.catch(() => {});
      return running;
    },

    destroy(sandboxId) {
      const sandbox = sandboxes.get(sandboxId);
      if (sandbox === undefined) return Promise.resolve();
      sandbox.destroying ??= (async () => {
        await sandbox.startup;
        try {
          await terminate(sandbox);
          if (sandbox.root !== undefined) await removeTree(sandbox.root);
        } finally {
          sandboxes.delete(sandboxId);
          destroyed++;
        }
      })();
      return sandbox.destroying;
    },

    liveSandboxes: () => sandboxes.size,
    stats: () => ({ live: sandboxes.size, started, destroyed }),
  };
}
