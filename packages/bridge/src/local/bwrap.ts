import { spawnSync } from "node:child_process";
import { existsSync, lstatSync, readlinkSync } from "node:fs";

/** Where the sandbox's working directory is mounted inside bubblewrap. */
export const SANDBOX_WORKSPACE = "/workspace";

/** System directories made visible read-only inside the sandbox (those that exist). */
const SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

/** Read-only bind (or the same symlink, for merged-/usr systems) of each system directory. */
function systemMounts(): string[] {
  const args: string[] = [];
  for (const dir of SYSTEM_DIRS) {
    if (!existsSync(dir)) continue;
    if (lstatSync(dir).isSymbolicLink()) args.push("--symlink", readlinkSync(dir), dir);
    else args.push("--ro-bind", dir, dir);
  }
  return args;
}

/** True when `dir` is one of the read-only system directories or below one. */
export function isUnderSystemDir(dir: string): boolean {
  return SYSTEM_DIRS.some((root) => dir === root || dir.startsWith(`${root}/`));
}

/**
 * bubblewrap arguments for one sandbox: every namespace unshared (so no network and a new PID
 * namespace), killed with the bridge, read-only system directories,
 * `workspaceDir` at /workspace, a private /tmp, fresh /proc and /dev.
 */
// No --new-session: the host spawns bwrap as a session leader without a terminal (so there is no
// TTY to inject into), and keeping the command in bwrap's process group lets the host kill every
// process of the sandbox with one signal and see when the last one is gone.
export function bwrapArgs(workspaceDir: string, cwd: string, extraDirs: string[] = []): string[] {
  const args = [
    "--unshare-all",
    "--die-with-parent",
    "--hostname",
    "sandbox",
    ...systemMounts(),
    "--bind",
    workspaceDir,
    SANDBOX_WORKSPACE,
    "--tmpfs",
    "/tmp",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
  ];
  for (const dir of extraDirs) args.push("--dir", dir);
  args.push("--chdir", cwd);
  return args;
}

export interface BwrapProbe {
  ok: boolean;
  /** Why bubblewrap cannot be used, when it cannot. */
  reason?: string;
}

const probes = new Map<string, BwrapProbe>();

/** Runs `bwrap ... true` once per binary path and remembers whether it works here. */
export function probeBwrap(bwrapPath: string, workspaceDir: string): BwrapProbe {
  const cached = probes.get(bwrapPath);
  if (cached !== undefined) return cached;
  const run = spawnSync(
    bwrapPath,
    [...bwrapArgs(workspaceDir, SANDBOX_WORKSPACE), "--", "/bin/sh", "-c", "true"],
    { stdio: ["ignore", "ignore", "pipe"], timeout: 10_000, env: { PATH: "/usr/bin:/bin" } },
  );
  let probe: BwrapProbe;
  if (run.error !== undefined) {
    const code = (run.error as NodeJS.ErrnoException).code;
    probe = {
      ok: false,
      reason:
        code === "ENOENT"
          ? `${bwrapPath} is not installed (Debian/Ubuntu: apt-get install bubblewrap)`
          : `${bwrapPath} could not be run: ${run.error.message}`,
    };
  } else if (run.status !== 0) {
    const stderr = run.stderr?.toString("utf8").trim().slice(0, 500) ?? "";
    probe = {
      ok: false,
      reason: `${bwrapPath} failed a trial run (exit ${run.status ?? run.signal}): ${stderr || "no message"}; unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / apparmor_restrict_unprivileged_userns)`,
    };
  } else {
    probe = { ok: true };
  }
  probes.set(bwrapPath, probe);
  return probe;
}
