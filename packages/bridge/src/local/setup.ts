/**
 * What a local backend sets up once, before any call: its options checked, the state directory
 * with the sandboxes' passwd and group files, the probes (does bubblewrap work here, can the
 * sandboxes' uids run commands and the network relay), the uid pool and cgroups, the limits no
 * cgroup enforces, the `/health` report, the helper processes that start sandboxes, and the sweep
 * of what dead predecessors left. Everything a call needs from it is in {@link LocalHost}.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, closeSync, mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { brandClass } from "@remote-task/internal";
import type { SandboxReport } from "@remote-task/protocol";
import type { EgressOptions } from "../host/egress.js";
import {
  checkUidRange,
  DEFAULT_SANDBOX_UIDS,
  resolveSandboxLimits,
  type SandboxLimits,
} from "../host/limits.js";
import { checkedPatterns, stderrWarnings } from "../host/options.js";
import { newInstanceName } from "../host/ownership.js";
import type { BridgeLogger } from "../logger.js";
import type { NetworkMode, ParsedHostPattern } from "../network.js";
import {
  bwrapBaseArgs,
  DEFAULT_ETC_ENTRIES,
  probeBwrap,
  SANDBOX_GROUP,
  SANDBOX_PASSWD,
} from "./bwrap.js";
import { type CgroupSet, createCgroupSet, sweepCgroups } from "./cgroups.js";
import { inheritedDescriptors, openDevNull, sandboxStdio } from "./descriptors.js";
import { canUnshareIpc, findPerl, freshKeyringsProgram } from "./keyring.js";
import { removeLeftovers } from "./leftovers.js";
import { sandboxSeccompFilter } from "./seccomp.js";
import { findShell, processLimitFlag } from "./shell.js";
import {
  type Slot,
  SlotPool,
  sweepUidClaims,
  type UidRange,
  uidClaimsDir,
  withTrialUid,
} from "./slots.js";
import { Spawner } from "./spawner.js";
import {
  checkTraversable,
  defaultTmpRoot,
  isTmpfs,
  STATE_DIR_PREFIX,
  sweepStateDirs,
} from "./state-dir.js";

export type LocalIsolationOption = "auto" | "bwrap" | "none";
export type LocalIsolation = "bwrap" | "none";

export interface LocalBackendOptions {
  /**
   * `auto` (default) uses bubblewrap when a trial run works, else none (with a warning through
   * `logger`); `bwrap` requires it.
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
  /**
   * Where the backend's warnings go (bubblewrap unusable, no network for sandboxes), as
   * `warning` entries (default: one `remote-task: warning: ...` line each on stderr).
   */
  logger?: BridgeLogger | undefined;
}

/** Thrown by {@link setUpLocalHost} when `isolation: "bwrap"` cannot be honoured. */
export class IsolationUnavailableError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.IsolationUnavailableError");
  override readonly name = "IsolationUnavailableError";

  constructor(readonly reason: string) {
    super(
      `bubblewrap isolation was requested but cannot be used here: ${reason}. Install bubblewrap, allow user namespaces, or choose isolation "none".`,
    );
  }
}

const DEFAULT_KILL_GRACE_MS = 2_000;
/** How long after SIGKILL the last process of a sandbox may take to disappear. */
export const EXIT_WAIT_MS = 2_000;
/** Most helper processes starting sandboxes side by side (see spawner.ts). */
const HELPERS = 4;

/** How every command of a backend is started: sandbox.ts builds each call's spawn request from it. */
interface CommandLaunch {
  readonly bwrapPath: string;
  /** Entries of the host's `/etc` visible inside bubblewrap. */
  readonly etcEntries: readonly string[];
  /** The bubblewrap arguments every sandbox shares. */
  readonly bwrapBase: readonly string[];
  /**
   * The seccomp filter of bubblewrap sandboxes, in base64 (keyrings, AIO, io_uring refused; see
   * seccomp.ts); undefined without bubblewrap or on an architecture it does not know.
   */
  readonly seccompFilter: string | undefined;
  /**
   * Isolation none with a uid per sandbox: the Perl binary and program each command starts
   * through, for fresh keyrings and, with `privateIpc`, an IPC namespace of its own (keyring.ts);
   * undefined otherwise or without Perl.
   */
  readonly keyrings: { perl: string; program: string; privateIpc: boolean } | undefined;
  /** The shell commands run with: bash where the host has it, else `/bin/sh` (shell.ts). */
  readonly shell: { path: string; args: string[] };
  /** `ulimit`s for what no cgroup enforces (per process, or per uid for the process count). */
  readonly ulimits: ReadonlyArray<readonly [string, number]>;
}

/** What a backend set up once and every call uses. */
export interface LocalHost {
  readonly isolation: LocalIsolation;
  readonly limits: SandboxLimits;
  readonly allowPrivate: readonly ParsedHostPattern[];
  /** Extra CAs the egress proxy trusts upstream on intercepted hosts (egress.upstreamCa). */
  readonly upstreamCa: string | undefined;
  readonly onTmpfs: boolean;
  readonly killGraceMs: number;
  /** The sandboxes' host uids (the bridge runs as root), else undefined. */
  readonly uids: UidRange | undefined;
  readonly stateDir: string;
  /** How each command is started (bubblewrap or the plain shell, and their settings). */
  readonly launch: CommandLaunch;
  /** Modes of `network` the backend enforces (none without bubblewrap). */
  readonly networkModes: NetworkMode[] | undefined;
  /**
   * `/bin/sh`'s `ulimit` flag for the process count, where the uid's rlimit enforces it (for
   * `killUid`'s check).
   */
  readonly processFlag: string | undefined;
  readonly report: SandboxReport;
  readonly spawner: Spawner;
  readonly pool: SlotPool;
  /** Resolves once what dead predecessors left behind is swept. */
  readonly ready: Promise<void>;
  /**
   * Hands a slot whose processes are all gone out again; under isolation none with a uid per
   * sandbox, first removes what its last call left in the host's shared directories.
   */
  releaseSlot(slot: Slot): Promise<void>;
  /** Stops the helpers and slots, removes the cgroups and the state directory. */
  removeEverything(killFirst: boolean): void;
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

/** The state directory with the sandboxes' passwd and group files. */
function makeStateDir(tmpRoot: string, instance: string) {
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
  return { stateDir, passwdFile, groupFile };
}

/**
 * Which isolation works here: bubblewrap when requested (or `auto`) and a trial run works, else
 * none; and with uids, that commands can run as them at all.
 */
function probeIsolation(
  options: LocalBackendOptions,
  host: {
    root: boolean;
    uids: UidRange | undefined;
    claimsDir: string | undefined;
    instance: string;
    stateDir: string;
    bwrapBase: readonly string[];
    logger: BridgeLogger;
  },
): LocalIsolation {
  const { uids, claimsDir, instance } = host;
  const requested = options.isolation ?? "auto";
  // A trial runs as a uid this backend holds for the moment, never as one a sandbox may hold.
  const asTrialUid = <T>(trial: (uid: number | undefined) => T): T =>
    uids === undefined || claimsDir === undefined
      ? trial(undefined)
      : withTrialUid(claimsDir, uids, instance, trial);
  let isolation: LocalIsolation = "none";
  if (requested !== "none") {
    const bwrapPath = options.bwrapPath ?? "bwrap";
    const probe = asTrialUid((uid) => probeBwrap(bwrapPath, host.bwrapBase, uid));
    if (probe.ok) isolation = "bwrap";
    else if (requested === "bwrap") throw new IsolationUnavailableError(probe.reason ?? "unknown");
    else {
      host.logger({
        event: "warning",
        level: "warn",
        detail: `bubblewrap is not usable here (${probe.reason}); commands run with isolation "none": no namespaces, ${host.root ? "an unprivileged uid per sandbox" : "the bridge's own uid"}, host files visible.`,
      });
    }
  }
  if (isolation === "none" && uids !== undefined) {
    asTrialUid((uid = uids.first) => {
      const trial = spawnSync("/bin/sh", ["-c", "exit 0"], {
        cwd: host.stateDir,
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
  return isolation;
}

/** How each sandbox is confined, as `/health` reports it. */
function sandboxReport(
  isolation: LocalIsolation,
  limits: SandboxLimits,
  uids: UidRange | undefined,
  cgroups: CgroupSet | undefined,
  processFlag: string | undefined,
): SandboxReport {
  const teardown =
    isolation === "bwrap"
      ? "pid-namespace"
      : cgroups !== undefined
        ? "cgroup"
        : uids !== undefined
          ? "uid"
          : "process-group";
  return {
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
}

/** Only bubblewrap gives a sandbox a network namespace of its own; without it nothing is enforced. */
function networkModesFor(
  isolation: LocalIsolation,
  root: boolean,
  logger: BridgeLogger,
): NetworkMode[] | undefined {
  if (isolation !== "bwrap") return undefined;
  const reason = relayUnavailable(root);
  if (reason !== undefined) {
    logger({
      event: "warning",
      level: "warn",
      detail: `sandboxes get no network access at all (network "none" only): ${reason}`,
    });
  }
  return reason === undefined ? ["none", "allow", "open"] : ["none"];
}

/**
 * Isolation none with a uid per sandbox: how each command starts with fresh keyrings (and an IPC
 * namespace where this process may make one); what stays shared is said as a warning.
 */
function freshKeyrings(logger: BridgeLogger): CommandLaunch["keyrings"] {
  const perl = findPerl();
  const privateIpc = perl !== undefined && canUnshareIpc(perl);
  const program = freshKeyringsProgram(process.arch, privateIpc);
  if (perl !== undefined && program !== undefined) {
    if (!privateIpc)
      logger({
        event: "warning",
        level: "warn",
        detail:
          "System V and POSIX IPC objects (message queues, shared memory, semaphores) are shared between the calls given the same uid: this process may not make an IPC namespace (CAP_SYS_ADMIN).",
      });
    return { perl, program, privateIpc };
  }
  logger({
    event: "warning",
    level: "warn",
    detail: `kernel keyrings are shared between the calls given the same uid: ${perl === undefined ? "no perl here to start each command with fresh keyrings" : `keyctl's number is not known on ${process.arch}`}.`,
  });
  return undefined;
}

/**
 * The shell commands run with, and the `ulimit`s for what no cgroup enforces (per process, or
 * per uid for the process count).
 */
function shellLimits(
  isolation: LocalIsolation,
  limits: SandboxLimits,
  cgroups: CgroupSet | undefined,
  uids: UidRange | undefined,
  logger: BridgeLogger,
) {
  const shell = findShell();
  if (shell.path === "/bin/sh") {
    logger({
      event: "warning",
      level: "warn",
      detail:
        "bash is not installed here: commands run with /bin/sh, where bash's [[ ... ]], {a,b} and arrays do not work.",
    });
  }
  const nprocByRlimit = cgroups?.enforcement.pids === undefined && uids !== undefined;
  const processFlag = nprocByRlimit ? processLimitFlag() : undefined;
  const shellProcessFlag = nprocByRlimit ? processLimitFlag(shell.path) : undefined;
  // The open files of each process, low: the host's file table is shared and unlimited per uid.
  const ulimits: [string, number][] = [["-n", limits.openFiles]];
  if (shellProcessFlag !== undefined) ulimits.push([shellProcessFlag, limits.processes]);
  if (cgroups?.enforcement.memory === undefined)
    ulimits.push(["-d", Math.floor(limits.memoryBytes / 1024)]);
  // `ulimit -f` counts 1024-byte blocks in bash, 512-byte ones in POSIX shells.
  const fileBlock = shell.path.endsWith("/bash") ? 1024 : 512;
  if (isolation === "none") ulimits.push(["-f", Math.floor(limits.workspaceBytes / fileBlock)]);

  return { shell, processFlag, shellProcessFlag, ulimits };
}

/** Sets up a backend's host side; throws on bad options or unusable isolation, leaving nothing. */
export function setUpLocalHost(options: LocalBackendOptions = {}): LocalHost {
  const logger = options.logger ?? stderrWarnings;
  const limits = resolveSandboxLimits(options.limits);
  const allowPrivate = checkedPatterns(options.egress?.allowPrivate);
  const tmpRoot = options.tmpRoot ?? defaultTmpRoot(limits);
  const onTmpfs = isTmpfs(tmpRoot);
  const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
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
  const { stateDir, passwdFile, groupFile } = makeStateDir(tmpRoot, instance);
  const etcEntries = options.etc ?? DEFAULT_ETC_ENTRIES;
  const bwrapBase = bwrapBaseArgs({
    workspaceBytes: limits.workspaceBytes,
    tmpBytes: limits.tmpBytes,
    passwdFile,
    groupFile,
    etcEntries,
  });

  let isolation: LocalIsolation;
  try {
    isolation = probeIsolation(options, {
      root,
      uids,
      claimsDir,
      instance,
      stateDir,
      bwrapBase,
      logger,
    });
  } catch (error) {
    rmSync(stateDir, { recursive: true, force: true });
    throw error;
  }

  const networkModes = networkModesFor(isolation, root, logger);

  const keyrings = isolation === "none" && uids !== undefined ? freshKeyrings(logger) : undefined;
  const cgroups = options.cgroups === false ? undefined : createCgroupSet(instance);
  const { shell, processFlag, shellProcessFlag, ulimits } = shellLimits(
    isolation,
    limits,
    cgroups,
    uids,
    logger,
  );
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

  return {
    isolation,
    limits,
    allowPrivate,
    upstreamCa: options.egress?.upstreamCa,
    onTmpfs,
    killGraceMs,
    uids,
    stateDir,
    launch: {
      bwrapPath: options.bwrapPath ?? "bwrap",
      etcEntries,
      bwrapBase,
      seccompFilter: isolation === "bwrap" ? sandboxSeccompFilter()?.toString("base64") : undefined,
      keyrings,
      shell,
      ulimits,
    },
    networkModes,
    processFlag,
    report: sandboxReport(isolation, limits, uids, cgroups, shellProcessFlag),
    spawner,
    pool,
    ready,
    async releaseSlot(slot) {
      if (isolation === "none" && slot.uid !== undefined) await removeLeftovers(slot.uid);
      pool.release(slot);
    },
    removeEverything(killFirst) {
      spawner.close();
      pool.close(killFirst);
      cgroups?.remove();
      rmSync(stateDir, { recursive: true, force: true });
      try {
        closeSync(devNull);
      } catch {
        // already closed
      }
    },
  };
}
