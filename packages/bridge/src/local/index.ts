import { spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  closeSync,
  mkdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { hasBrand } from "@remote-task/internal";
import { hostPatternSchema, type SandboxReport } from "@remote-task/protocol";
import {
  BackendError,
  type ExecSpec,
  type RunningCommand,
  type SandboxBackend,
} from "../backend.js";
import { type NetworkMode, type ParsedHostPattern, parseHostPattern } from "../network.js";
import {
  bwrapArgs,
  bwrapBaseArgs,
  DEFAULT_ETC_ENTRIES,
  isUnderSystemDir,
  probeBwrap,
  SANDBOX_GROUP,
  SANDBOX_PASSWD,
  SANDBOX_WORKSPACE,
} from "./bwrap.js";
import { createCgroupSet, sweepCgroups } from "./cgroups.js";
import { refuseNul, resolveCwd } from "./cwd.js";
import { inheritedDescriptors, openDevNull, sandboxStdio } from "./descriptors.js";
import { type EgressOptions, type EgressProxy, type Endpoint, startEgressProxy } from "./egress.js";
import {
  checkUidRange,
  DEFAULT_SANDBOX_LIMITS,
  DEFAULT_SANDBOX_UIDS,
  resolveSandboxLimits,
  type SandboxLimits,
} from "./limits.js";
import { limitNotes } from "./notes.js";
import { mergeOutput } from "./output.js";
import { cleanUpAtExit, newInstanceName } from "./ownership.js";
import {
  exitStatus,
  groupGone,
  killUid,
  pollUntil,
  processEnded,
  settleWithin,
  signal,
} from "./processes.js";
import { proxyEnvironment, relayPrelude, SANDBOX_NODE, SANDBOX_PROXY_SOCKET } from "./relay.js";
import { GATE_FD, processLimitFlag, shellScript } from "./shell.js";
import {
  type Slot,
  SlotPool,
  sweepUidClaims,
  type UidRange,
  uidClaimsDir,
  withTrialUid,
} from "./slots.js";
import { type SandboxProcess, Spawner, type SpawnRequest } from "./spawner.js";
import {
  checkTraversable,
  defaultTmpRoot,
  isTmpfs,
  makeCallDirectories,
  removeCallDir,
  STATE_DIR_PREFIX,
  sweepStateDirs,
} from "./state-dir.js";

export { DEFAULT_ETC_ENTRIES } from "./bwrap.js";
export type { EgressOptions, Endpoint } from "./egress.js";
export { DEFAULT_SANDBOX_LIMITS, DEFAULT_SANDBOX_UIDS, type SandboxLimits } from "./limits.js";
export type { UidRange } from "./slots.js";

export type LocalIsolationOption = "auto" | "bwrap" | "none";
export type LocalIsolation = "bwrap" | "none";

export interface LocalBackendOptions {
  /**
   * `auto` (default) uses bubblewrap when a trial run works, else none (with a warning on
   * stderr); `bwrap` requires it.
   */
  isolation?: LocalIsolationOption | undefined;
  /**
   * Parent of the directory this backend owns (default: `/dev/shm` when it is a tmpfs with room
   * for a sandbox's `/workspace` and `/tmp`, else the OS temp directory).
   */
  tmpRoot?: string | undefined;
  /** Time between SIGTERM and SIGKILL when a command is stopped (default 2000 ms). */
  killGraceMs?: number | undefined;
  /** bubblewrap binary (default `bwrap` on PATH). */
  bwrapPath?: string | undefined;
  /** Per-sandbox limits (default {@link DEFAULT_SANDBOX_LIMITS}). */
  limits?: Partial<SandboxLimits> | undefined;
  /**
   * Host uids for sandboxes when the bridge runs as root, one per sandbox running at a time
   * (default {@link DEFAULT_SANDBOX_UIDS}); also the most sandboxes at once.
   */
  uids?: UidRange | undefined;
  /** Use cgroups for limits and teardown where this process can create them (default true). */
  cgroups?: boolean | undefined;
  /** Entries of the host's `/etc` visible inside bubblewrap (default {@link DEFAULT_ETC_ENTRIES}). */
  etc?: readonly string[] | undefined;
  /**
   * The egress proxy of calls with network `open` or an allowlist (bwrap only): which hosts may
   * be reached at non-public addresses (default: none).
   */
  egress?: EgressOptions | undefined;
}

export interface LocalBackendStats {
  /** Sandboxes started and not yet destroyed. */
  live: number;
  started: number;
  destroyed: number;
}

/** The local backend: a process per call in a fresh, confined sandbox. */
export interface LocalBackend extends SandboxBackend {
  readonly name: "local";
  readonly isolation: LocalIsolation;
  /** How each sandbox is confined; reported by `/health`. */
  readonly sandbox: SandboxReport;
  /** The directory this backend owns (per-call directories, its passwd file); removed by close. */
  readonly stateDir: string;
  /** Resolves once what dead predecessors left behind is swept (`start` waits for it). */
  readonly ready: Promise<void>;
  /** Sandboxes started and not yet destroyed (0 after every call has ended). */
  liveSandboxes(): number;
  stats(): LocalBackendStats;
  /**
   * Never let a sandbox connect to `endpoint` (where the bridge itself listens: its port on any
   * address of this machine). `startLocalBridge` calls it with its own address.
   */
  excludeFromEgress(endpoint: Endpoint): void;
  /** Stops every sandbox and removes everything the backend made. Idempotent. */
  close(): Promise<void>;
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
/** How long after SIGKILL the last process of a sandbox may take to disappear. */
const EXIT_WAIT_MS = 2_000;
/** How long a slot may wait for its last processes to be reaped before it is retired. */
const DRAIN_LIMIT_MS = 60_000;
/** Most helper processes starting sandboxes side by side (see spawner.ts). */
const HELPERS = 4;

interface Sandbox {
  slot?: Slot;
  /** Host directory of the call (isolation none). */
  root?: string;
  proc?: SandboxProcess;
  /** Host pid of the first process inside bubblewrap's PID namespace. */
  nsInit?: Promise<number | undefined>;
  /** Resolves once the child has exited (immediately when none was spawned). */
  exited: Promise<void>;
  /** Set when teardown found nothing of the sandbox left, not even a process to reap. */
  drained?: boolean;
  startup: Promise<unknown>;
  destroying?: Promise<void>;
  /** The egress proxy of a call with network `open` or an allowlist. */
  egress?: EgressProxy;
}

/**
 * Why the sandboxes' uids cannot run this Node binary inside bubblewrap (the network relay runs
 * on it), or undefined when they can.
 */
function relayUnavailable(root: boolean): string | undefined {
  if (!root) return undefined; // commands run as the bridge's own uid, which runs this binary
  try {
    checkTraversable(
      dirname(process.execPath),
      "Install Node where every user may run it (e.g. /usr/local/bin) to give sandboxes network access.",
    );
  } catch (error) {
    return (error as Error).message;
  }
  const mode = statSync(process.execPath).mode;
  if ((mode & 0o005) !== 0o005) {
    return `${process.execPath} has mode ${(mode & 0o777).toString(8)}: the sandboxes' uids cannot run it.`;
  }
  return undefined;
}

function checkedPatterns(patterns: readonly string[] | undefined): ParsedHostPattern[] {
  return (patterns ?? []).map((pattern, index) => {
    const parsed = hostPatternSchema.safeParse(pattern);
    if (!parsed.success) {
      throw new TypeError(
        `egress.allowPrivate[${index}] (${JSON.stringify(pattern)}) is not a host pattern: ${parsed.error.issues[0]?.message ?? "invalid"}.`,
      );
    }
    return parseHostPattern(parsed.data);
  });
}

/**
 * Creates the local backend. The command never runs as host root: when the bridge is root each
 * sandbox gets an unprivileged uid of its own (`uids`), and bubblewrap adds a user namespace.
 * With `isolation: "auto"` bubblewrap is probed once (a real trial run) and used when it works;
 * `"bwrap"` throws {@link IsolationUnavailableError} when it does not.
 */
export function createLocalBackend(options: LocalBackendOptions = {}): LocalBackend {
  const limits = resolveSandboxLimits(options.limits);
  const allowPrivate = checkedPatterns(options.egress?.allowPrivate);
  const tmpRoot = options.tmpRoot ?? defaultTmpRoot(limits);
  const onTmpfs = isTmpfs(tmpRoot);
  const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
  const bwrapPath = options.bwrapPath ?? "bwrap";
  const requested = options.isolation ?? "auto";
  const root = process.getuid?.() === 0;
  if (options.uids !== undefined) {
    checkUidRange(options.uids);
    if (!root) {
      throw new TypeError(
        "uids needs the bridge to run as root (it switches each sandbox to one of them); without root every command runs as the bridge's own uid.",
      );
    }
  }
  const uids = root ? (options.uids ?? DEFAULT_SANDBOX_UIDS) : undefined;
  const claimsDir = uids === undefined ? undefined : uidClaimsDir();
  if (root) checkTraversable(tmpRoot);

  const instance = newInstanceName();
  const stateDir = join(tmpRoot, `${STATE_DIR_PREFIX}${instance}`);
  mkdirSync(stateDir);
  chmodSync(stateDir, 0o711);
  const passwdFile = join(stateDir, "passwd");
  const groupFile = join(stateDir, "group");
  for (const [file, text] of [
    [passwdFile, SANDBOX_PASSWD],
    [groupFile, SANDBOX_GROUP],
  ] as const) {
    writeFileSync(file, text);
    chmodSync(file, 0o644); // readable by the sandboxes' uids whatever the umask
  }
  const bwrapBase = bwrapBaseArgs({
    workspaceBytes: limits.workspaceBytes,
    tmpBytes: limits.tmpBytes,
    passwdFile,
    groupFile,
    etcEntries: options.etc ?? DEFAULT_ETC_ENTRIES,
  });

  let isolation: LocalIsolation = "none";
  try {
    // A trial runs as a uid this backend holds for the moment, never as one a sandbox may hold.
    const asTrialUid = <T>(trial: (uid: number | undefined) => T): T =>
      uids === undefined || claimsDir === undefined
        ? trial(undefined)
        : withTrialUid(claimsDir, uids, instance, trial);
    if (requested !== "none") {
      const probe = asTrialUid((uid) => probeBwrap(bwrapPath, bwrapBase, uid));
      if (probe.ok) isolation = "bwrap";
      else if (requested === "bwrap")
        throw new IsolationUnavailableError(probe.reason ?? "unknown");
      else {
        process.stderr.write(
          `remote-task: warning: bubblewrap is not usable here (${probe.reason}); commands run with isolation "none": no namespaces, ${root ? "an unprivileged uid per sandbox" : "the bridge's own uid"}, host files visible.\n`,
        );
      }
    }
    if (isolation === "none" && uids !== undefined) {
      asTrialUid((uid = uids.first) => {
        const trial = spawnSync("/bin/sh", ["-c", "exit 0"], {
          cwd: stateDir,
          uid,
          gid: uid,
          env: {},
          stdio: "ignore",
        });
        if (trial.error !== undefined || trial.status !== 0) {
          throw new TypeError(
            `Cannot run commands as uid ${uid} here (${trial.error?.message ?? `exit ${trial.status ?? trial.signal}`}); choose uids this process may switch to (in a user namespace, a mapped range).`,
          );
        }
      });
    }
  } catch (error) {
    rmSync(stateDir, { recursive: true, force: true });
    throw error;
  }

  // Only bubblewrap gives a sandbox a network namespace of its own; without it nothing is enforced.
  let networkModes: NetworkMode[] | undefined;
  if (isolation === "bwrap") {
    const reason = relayUnavailable(root);
    if (reason !== undefined) {
      process.stderr.write(
        `remote-task: warning: sandboxes get no network access at all (network "none" only): ${reason}\n`,
      );
    }
    networkModes = reason === undefined ? ["none", "allow", "open"] : ["none"];
  }
  const bridgeEndpoints: Endpoint[] = [];
  let egressSockets = 0;

  const cgroups = options.cgroups === false ? undefined : createCgroupSet(instance);
  const processFlag =
    cgroups?.enforcement.pids === undefined && uids !== undefined ? processLimitFlag() : undefined;
  /** `ulimit`s for what no cgroup enforces (per process, or per uid for the process count). */
  const ulimits: [string, number][] = [];
  if (processFlag !== undefined) ulimits.push([processFlag, limits.processes]);
  if (cgroups?.enforcement.memory === undefined)
    ulimits.push(["-d", Math.floor(limits.memoryBytes / 1024)]);
  if (isolation === "none") ulimits.push(["-f", Math.floor(limits.workspaceBytes / 512)]);

  const teardown =
    isolation === "bwrap"
      ? "pid-namespace"
      : cgroups !== undefined
        ? "cgroup"
        : uids !== undefined
          ? "uid"
          : "process-group";
  const report: SandboxReport = {
    user: uids === undefined ? "bridge-uid" : "uid-per-sandbox",
    ...(uids === undefined ? {} : { uids: { first: uids.first, count: uids.count } }),
    ...(cgroups?.enforcement.pids !== undefined
      ? { processes: { max: limits.processes, by: cgroups.enforcement.pids } }
      : processFlag !== undefined
        ? { processes: { max: limits.processes, by: "rlimit-nproc" } }
        : {}),
    memoryBytes: { max: limits.memoryBytes, by: cgroups?.enforcement.memory ?? "rlimit-data" },
    ...(isolation === "bwrap"
      ? {
          workspaceBytes: { max: limits.workspaceBytes, by: "tmpfs" },
          tmpBytes: { max: limits.tmpBytes, by: "tmpfs" },
        }
      : { workspaceBytes: { max: limits.workspaceBytes, by: "rlimit-fsize" } }),
    teardown,
  };

  const devNull = openDevNull();
  // Every descriptor this process inherited is /dev/null in the helper, hence in every sandbox.
  const spawner = new Spawner(
    sandboxStdio(["ignore", "ignore", "inherit", "ipc"], inheritedDescriptors(), devNull),
    Math.min(HELPERS, availableParallelism()),
  );
  const pool = new SlotPool({
    instance,
    uids,
    claimsDir,
    cgroups,
    // Under bubblewrap the namespace's first process is in the cgroup too; the limit is the
    // command's.
    limits: {
      processes: limits.processes + (isolation === "bwrap" ? 1 : 0),
      memoryBytes: limits.memoryBytes,
    },
  });
  const ready = (async () => {
    const limitMs = killGraceMs + EXIT_WAIT_MS;
    await sweepCgroups(limitMs).catch(() => {});
    if (claimsDir !== undefined) await sweepUidClaims(claimsDir, instance, limitMs).catch(() => {});
    await sweepStateDirs(tmpRoot);
  })();

  const sandboxes = new Map<string, Sandbox>();
  let started = 0;
  let destroyed = 0;
  let calls = 0;
  let closed = false;
  const draining = new Set<Promise<boolean>>();

  const removeEverything = (killFirst: boolean) => {
    spawner.close();
    pool.close(killFirst);
    cgroups?.remove();
    rmSync(stateDir, { recursive: true, force: true });
    try {
      closeSync(devNull);
    } catch {
      // already closed
    }
  };
  const unregisterExit = cleanUpAtExit(() => removeEverything(true));

  async function prepare(spec: ExecSpec, sandbox: Sandbox): Promise<RunningCommand> {
    refuseNul(spec);
    const cwd = resolveCwd(spec.cwd, isolation === "bwrap");
    await ready;
    if (closed) throw new BackendError("sandbox_error", "The local backend is closed.");
    const slot = pool.acquire();
    if (slot === undefined) {
      throw new BackendError(
        "capacity_exceeded",
        `All ${uids?.count} sandbox uids are in use; try again when a call has ended.`,
        { retryAfterSeconds: 1 },
      );
    }
    sandbox.slot = slot;
    const bwrap = isolation === "bwrap";
    const dirs = bwrap
      ? undefined
      : makeCallDirectories(stateDir, String(++calls), slot.uid, cwd.workspaceRelative);
    if (dirs !== undefined) sandbox.root = dirs.root;
    const countersBefore = slot.cgroup?.counters();
    if (spec.signal.aborted)
      throw new BackendError("sandbox_error", "The call ended before the command started.");

    const network = spec.network ?? "none";
    let binds: [string, string][] = [];
    if (bwrap && network !== "none") {
      const socketPath = join(stateDir, `egress-${++egressSockets}.sock`);
      sandbox.egress = await startEgressProxy({
        socketPath,
        policy: network,
        allowPrivate,
        protectedEndpoints: () => bridgeEndpoints,
      });
      // Only the sandbox's uid may connect to it.
      if (slot.uid !== undefined) chownSync(socketPath, slot.uid, slot.uid);
      chmodSync(socketPath, 0o600);
      binds = [
        [socketPath, SANDBOX_PROXY_SOCKET],
        [process.execPath, SANDBOX_NODE],
      ];
    }
    const env: Record<string, string> = {
      PATH: SANDBOX_PATH,
      HOME: dirs?.workspace ?? SANDBOX_WORKSPACE,
      LANG: "C.UTF-8",
      TMPDIR: dirs?.tmp ?? "/tmp",
      ...(binds.length > 0 ? proxyEnvironment() : {}),
      ...spec.env,
    };
    const extraDirs =
      cwd.inside === SANDBOX_WORKSPACE || isUnderSystemDir(cwd.inside) ? [] : [cwd.inside];
    const settings = ["--clearenv"];
    for (const [name, value] of Object.entries(env)) settings.push("--setenv", name, value);
    const request: SpawnRequest = bwrap
      ? {
          file: bwrapPath,
          // The request's env reaches only the sandboxed command: bwrap itself runs on the host
          // with a bare PATH (a request's LD_PRELOAD must not load into it), and the variables
          // travel through a pipe (--args 3), not the command line that `ps` shows.
          args: [
            "--args",
            "3",
            ...bwrapArgs(bwrapBase, { cwd: cwd.inside, extraDirs, binds, infoFd: 4, blockFd: 5 }),
            "--",
            "/bin/sh",
            "-c",
            shellScript(spec.command, {
              gate: false,
              ulimits,
              setup: binds.length > 0 ? relayPrelude() : [],
            }),
          ],
          cwd: stateDir,
          env: { PATH: SANDBOX_PATH },
          stdin: spec.stdin !== undefined,
          extraPipes: 3,
          input: { fd: 3, data: `${settings.join("\0")}\0` },
          infoFd: 4,
          gate: { fd: 5, data: "x" },
          cgroups: slot.cgroup?.dirs ?? [],
        }
      : {
          file: "/bin/sh",
          args: ["-c", shellScript(spec.command, { gate: true, ulimits })],
          cwd: dirs?.hostCwd ?? stateDir,
          env,
          stdin: spec.stdin !== undefined,
          extraPipes: 1,
          gate: { fd: GATE_FD, data: "\n" },
          cgroups: slot.cgroup?.dirs ?? [],
        };
    if (slot.uid !== undefined) request.uid = slot.uid;
    let proc: SandboxProcess;
    try {
      proc = await spawner.spawn(request);
    } catch (error) {
      throw new BackendError(
        "sandbox_error",
        `Could not start the command: ${(error as Error).message}`,
      );
    }
    sandbox.proc = proc;
    if (bwrap) sandbox.nsInit = proc.first;
    // A command that does not read its input ends with it unwritten: EPIPE here is no error.
    proc.stdin?.on("error", () => {});
    proc.stdin?.end(spec.stdin);
    const exit = proc.exit.then(({ code, signal: name, error }) => {
      if (error !== undefined)
        throw new BackendError("sandbox_error", `Could not confine the command: ${error}`);
      // Background processes the command left behind must not outlive it (or hold its pipes).
      signal(-proc.pid, "SIGKILL");
      slot.cgroup?.killNow();
      proc.stdin?.destroy();
      setTimeout(() => {
        proc.stdout.destroy();
        proc.stderr.destroy();
      }, PIPE_DRAIN_MS).unref();
      return exitStatus(code, name);
    });
    sandbox.exited = exit.then(
      () => {},
      () => {},
    );

    const stop = () => void terminate(sandbox);
    if (spec.signal.aborted) stop();
    else spec.signal.addEventListener("abort", stop, { once: true });

    return {
      output: mergeOutput(proc.stdout, proc.stderr, () =>
        limitNotes(exit, slot.cgroup, countersBefore, limits),
      ),
      exit,
    };
  }

  /**
   * Sends `name` to the sandbox's processes, not to bubblewrap's own (it would take them all down
   * at once). Inside bubblewrap the command's first process may not be forked yet: keep trying
   * until `deadline` while the sandbox is there.
   */
  async function signalSandbox(
    sandbox: Sandbox,
    name: NodeJS.Signals,
    deadline: number,
  ): Promise<void> {
    const proc = sandbox.proc;
    const cgroup = sandbox.slot?.cgroup;
    if (proc === undefined) return;
    if (cgroup === undefined) return signal(-proc.pid, name);
    if (isolation === "none") {
      signal(-proc.pid, name);
      cgroup.signal(name);
      return;
    }
    const nsInit = await sandbox.nsInit;
    await pollUntil(
      async () => cgroup.signal(name, nsInit) > 0 || proc.exited,
      deadline - Date.now(),
      5,
    );
  }

  /**
   * Hands the slot out again once its last sandbox's processes are reaped, not only dead: until
   * then they count against the slot's process limit (cgroup or uid). Orphans are reaped by the
   * host's init, which may take a moment; meanwhile other slots serve. Under bubblewrap the
   * namespace's first process reaps all others before it ends, and `terminate` waited for that:
   * at most that one process is left to reap.
   */
  async function releaseWhenDrained(slot: Slot, nsInit: number | undefined): Promise<void> {
    const { cgroup, uid } = slot;
    if (isolation === "none" && (cgroup === undefined ? uid === undefined : cgroup.drained()))
      return pool.release(slot);
    const drained =
      isolation === "bwrap"
        ? async () => nsInit === undefined || processEnded(nsInit)
        : cgroup !== undefined
          ? async () => cgroup.drained()
          : uid !== undefined
            ? () => killUid(uid, processFlag)
            : async () => true;
    // Each check of a uid starts a program: look less often.
    const interval = isolation === "bwrap" ? 2 : cgroup === undefined ? 100 : 20;
    const done = pollUntil(drained, DRAIN_LIMIT_MS, interval, true);
    draining.add(done);
    if (await done) pool.release(slot);
    draining.delete(done);
  }

  /**
   * SIGTERM to the sandbox's processes, SIGKILL to all after the grace period; resolves once none
   * is left (true) or the wait ran out (false).
   */
  async function terminate(sandbox: Sandbox): Promise<boolean> {
    const proc = sandbox.proc;
    if (proc === undefined) return true;
    if (!proc.exited) {
      const deadline = Date.now() + killGraceMs;
      await signalSandbox(sandbox, "SIGTERM", deadline);
      await settleWithin(sandbox.exited, Math.max(0, deadline - Date.now()));
    }
    const limitMs = killGraceMs + EXIT_WAIT_MS;
    const cgroup = sandbox.slot?.cgroup;
    if (isolation === "bwrap") {
      // Killing the namespace's first process makes the kernel kill every other one: none can run
      // again. The slot waits until the kernel is done (see releaseWhenDrained).
      const nsInit = await sandbox.nsInit;
      signal(nsInit ?? -proc.pid, "SIGKILL");
      await sandbox.exited;
      return true;
    }
    signal(-proc.pid, "SIGKILL");
    const groupKilled = cgroup?.killAll(limitMs);
    await sandbox.exited;
    if (groupKilled !== undefined) return groupKilled;
    const uid = sandbox.slot?.uid;
    if (uid !== undefined) {
      // Escapes from the process group are still processes of the sandbox's uid.
      sandbox.drained = await killUid(uid, processFlag);
      return true;
    }
    return pollUntil(async () => groupGone(proc.pid), limitMs);
  }

  return {
    name: "local",
    isolation,
    networkModes,
    sandbox: report,
    stateDir,
    ready,
    health: async () => ({ sandbox: report }),

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

    destroy,

    liveSandboxes: () => sandboxes.size,
    stats: () => ({ live: sandboxes.size, started, destroyed }),
    excludeFromEgress(endpoint) {
      bridgeEndpoints.push({ host: endpoint.host, port: endpoint.port });
    },

    async close() {
      if (closed) return;
      closed = true;
      await ready;
      await Promise.allSettled([...sandboxes.keys()].map(destroy));
      // Give the last slots a moment to drain, so their uids go back free.
      await settleWithin(Promise.allSettled(draining), killGraceMs + EXIT_WAIT_MS);
      unregisterExit();
      removeEverything(false);
    },
  };

  function destroy(sandboxId: string): Promise<void> {
    const sandbox = sandboxes.get(sandboxId);
    if (sandbox === undefined) return Promise.resolve();
    sandbox.destroying ??= (async () => {
      await sandbox.startup;
      let gone = true;
      try {
        gone = await terminate(sandbox);
        if (sandbox.root !== undefined) await removeCallDir(sandbox.root, onTmpfs);
      } finally {
        await sandbox.egress?.close();
        // A slot whose processes could not all be stopped is never handed out again.
        if (sandbox.slot !== undefined && gone) {
          if (sandbox.drained === true) pool.release(sandbox.slot);
          else void releaseWhenDrained(sandbox.slot, await sandbox.nsInit);
        }
        sandboxes.delete(sandboxId);
        destroyed++;
      }
      if (!gone) {
        throw new BackendError(
          "sandbox_error",
          `Processes of sandbox ${sandboxId} were still running ${killGraceMs + EXIT_WAIT_MS} ms after SIGKILL; its uid and cgroup are not reused.`,
        );
      }
    })();
    return sandbox.destroying;
  }
}
