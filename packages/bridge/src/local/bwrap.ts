import { spawnSync } from "node:child_process";
import { existsSync, lstatSync, readlinkSync, realpathSync, statSync } from "node:fs";
import { SANDBOX_WORKSPACE } from "../host/workspace.js";

/** The command's uid and gid inside the sandbox (any host uid maps to it). */
const SANDBOX_UID = 1000;

/** System directories made visible read-only inside the sandbox (those that exist). */
const SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/**
 * Entries of the host's `/etc` a command needs (dynamic linking, Debian's alternatives, time
 * zone, name service switch, TLS roots, MIME and magic databases, OS identification); nothing
 * else of `/etc` is there (no `shadow`, no package manager credentials, no host configuration).
 * `passwd` and `group` are the sandbox's own.
 */
export const DEFAULT_ETC_ENTRIES: readonly string[] = [
  "alternatives",
  "ca-certificates",
  "ca-certificates.conf",
  "crypto-policies",
  "debian_version",
  "gai.conf",
  "host.conf",
  "hosts",
  "ld.so.cache",
  "ld.so.conf",
  "ld.so.conf.d",
  "localtime",
  "lsb-release",
  "magic",
  "magic.mime",
  "mime.types",
  "nsswitch.conf",
  "os-release",
  "pki",
  "protocols",
  "services",
  "ssl",
  "terminfo",
  "timezone",
];

/** The sandbox's `/etc/passwd` and `/etc/group`. */
export const SANDBOX_PASSWD = `root:x:0:0:root:/root:/bin/sh\nsandbox:x:${SANDBOX_UID}:${SANDBOX_UID}:sandbox:${SANDBOX_WORKSPACE}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`;
export const SANDBOX_GROUP = `root:x:0:\nsandbox:x:${SANDBOX_UID}:\nnogroup:x:65534:\n`;

/** Read-only bind (or the same symlink) of `path`, if it exists. */
function mirror(path: string): string[] {
  if (!existsSync(path)) return [];
  if (lstatSync(path).isSymbolicLink()) return ["--symlink", readlinkSync(path), path];
  return ["--ro-bind", path, path];
}

/** True when `dir` is one of the read-only system directories or below one. */
function isUnderSystemDir(dir: string): boolean {
  return [...SYSTEM_DIRS, "/etc"].some((root) => dir === root || dir.startsWith(`${root}/`));
}

/** Directories every bubblewrap sandbox has, made fresh (tmpfs, proc, devtmpfs). */
const FRESH_DIRS = [
  "/",
  SANDBOX_WORKSPACE,
  "/tmp",
  "/proc",
  "/dev",
  "/dev/shm",
  "/dev/pts",
  "/etc",
];

/**
 * Whether `dir` (normalized, absolute) is a directory inside every sandbox: one of the fresh
 * directories, or a directory of the host's system directories or listed `/etc` entries (bound
 * read-only as they are), whose real path stays among them.
 */
export function isDirectoryInside(dir: string, etcEntries: readonly string[]): boolean {
  if (FRESH_DIRS.includes(dir)) return true;
  const visible = (path: string) =>
    isUnderSystemDir(path) &&
    (!path.startsWith("/etc/") || etcEntries.includes(path.split("/")[2] ?? ""));
  if (!visible(dir)) return false;
  try {
    return statSync(dir).isDirectory() && visible(realpathSync(dir));
  } catch {
    return false;
  }
}

/** What every sandbox of a backend shares. */
export interface BwrapConfig {
  workspaceBytes: number;
  tmpBytes: number;
  /** Host files mounted as the sandbox's `/etc/passwd` and `/etc/group`. */
  passwdFile: string;
  groupFile: string;
  etcEntries: readonly string[];
}

/** What differs from call to call. */
export interface BwrapCall {
  /** Working directory inside. */
  cwd: string;
  /** Host paths bound read-only inside: `[host, inside]`. */
  binds?: ReadonlyArray<readonly [string, string]> | undefined;
  /** Descriptors on which bwrap reports the sandbox's first pid, and then waits to start it. */
  infoFd?: number;
  blockFd?: number;
  /** Descriptor from which bwrap reads the seccomp filter (seccomp.ts). */
  seccompFd?: number;
}

/**
 * The bubblewrap arguments every sandbox of a backend shares, computed once: a user namespace
 * (the command is uid 1000 inside and the bridge's unprivileged uid outside, so it holds no
 * privilege on the host and `/proc/sys` is not writable), every other namespace unshared (no
 * network, its own PID namespace: when its first process ends, the kernel kills the rest), no
 * further user namespaces, killed with the bridge, read-only system directories and the listed
 * `/etc` entries, size-limited tmpfs `/workspace`, `/tmp` and `/dev/shm`, fresh `/proc` and a
 * read-only `/dev`.
 */
// No --new-session: the host spawns bwrap as a session leader without a terminal (so there is no
// TTY to inject into), and keeping the command in bwrap's process group lets the host signal every
// process of the sandbox at once.
export function bwrapBaseArgs(config: BwrapConfig): string[] {
  return [
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--uid",
    String(SANDBOX_UID),
    "--gid",
    String(SANDBOX_UID),
    "--die-with-parent",
    "--hostname",
    "sandbox",
    ...SYSTEM_DIRS.flatMap(mirror),
    ...config.etcEntries.flatMap((name) => mirror(`/etc/${name}`)),
    "--ro-bind",
    config.passwdFile,
    "/etc/passwd",
    "--ro-bind",
    config.groupFile,
    "/etc/group",
    "--size",
    String(config.workspaceBytes),
    "--tmpfs",
    SANDBOX_WORKSPACE,
    "--size",
    String(config.tmpBytes),
    "--tmpfs",
    "/tmp",
    "--proc",
    "/proc",
    // A fresh /dev: the usual device nodes and a private devpts instance. Its own tmpfs is
    // read-only (nothing may store data there: without a memory cgroup nothing else would
    // bound it), and /dev/shm is a tmpfs of /tmp's size.
    "--dev",
    "/dev",
    "--size",
    String(config.tmpBytes),
    "--tmpfs",
    "/dev/shm",
    "--remount-ro",
    "/dev",
  ];
}

/** The arguments of one sandbox: the shared ones, its directories, a read-only root, its cwd. */
export function bwrapArgs(base: readonly string[], call: BwrapCall): string[] {
  const args = [...base];
  for (const [host, inside] of call.binds ?? []) args.push("--ro-bind", host, inside);
  args.push("--remount-ro", "/", "--chdir", call.cwd);
  if (call.infoFd !== undefined) args.push("--info-fd", String(call.infoFd));
  if (call.blockFd !== undefined) args.push("--block-fd", String(call.blockFd));
  if (call.seccompFd !== undefined) args.push("--seccomp", String(call.seccompFd));
  return args;
}

export interface BwrapProbe {
  ok: boolean;
  /** Why bubblewrap cannot be used, when it cannot. */
  reason?: string;
}

/**
 * Runs `bwrap ... true` with the sandbox's own arguments, as the host uid sandboxes will run as
 * (`uid`, when the bridge drops privileges), and says whether it works here.
 */
export function probeBwrap(bwrapPath: string, base: readonly string[], uid?: number): BwrapProbe {
  const args = bwrapArgs(base, { cwd: SANDBOX_WORKSPACE });
  const run = spawnSync(bwrapPath, [...args, "--", "/bin/sh", "-c", "true"], {
    stdio: ["ignore", "ignore", "pipe"],
    timeout: 10_000,
    env: { PATH: "/usr/bin:/bin" },
    ...(uid === undefined ? {} : { uid, gid: uid }),
  });
  if (run.error !== undefined) {
    const code = (run.error as NodeJS.ErrnoException).code;
    return {
      ok: false,
      reason:
        code === "ENOENT"
          ? `${bwrapPath} is not installed (Debian/Ubuntu: apt-get install bubblewrap)`
          : `${bwrapPath} could not be run: ${run.error.message}`,
    };
  }
  if (run.status !== 0) {
    const stderr = run.stderr?.toString("utf8").trim().slice(0, 500) ?? "";
    const as = uid === undefined ? "" : ` as uid ${uid}`;
    return {
      ok: false,
      reason: `${bwrapPath} failed a trial run${as} (exit ${run.status ?? run.signal}): ${stderr || "no message"}; unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces / apparmor_restrict_unprivileged_userns)`,
    };
  }
  return { ok: true };
}
