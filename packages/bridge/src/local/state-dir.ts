import { chownSync, mkdirSync, rmdirSync, statfsSync, statSync } from "node:fs";
import { chmod, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { SandboxLimits } from "../host/limits.js";
import { isInstanceName, ownerAlive } from "../host/ownership.js";

/**
 * The directory a backend owns, `<tmpRoot>/remote-task-<instance>`: its passwd and group files,
 * and (isolation none) one directory per call with the call's `workspace` and `tmp`.
 */
export const STATE_DIR_PREFIX = "remote-task-";

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
 * Removes a call's directory: synchronously when the command left it empty and it is on a tmpfs
 * (three rmdir calls of a few microseconds), else the whole tree off the event loop.
 */
export async function removeCallDir(root: string, onTmpfs: boolean): Promise<void> {
  if (onTmpfs) {
    try {
      rmdirSync(join(root, "workspace"));
      rmdirSync(join(root, "tmp"));
      rmdirSync(root);
      return;
    } catch {
      // not empty
    }
  }
  await removeTree(root);
}

/** Every directory from `/` to `dir` must let other users through, or a sandbox uid cannot reach it. */
export function checkTraversable(
  dir: string,
  advice = "Use a tmpRoot that every user may traverse (mode 0711 or 0755 on each directory of its path).",
): void {
  for (let path = dir; ; path = dirname(path)) {
    const mode = statSync(path).mode;
    if ((mode & 0o001) === 0) {
      throw new TypeError(
        `The sandboxes' uids cannot reach ${dir}: ${path} has mode ${(mode & 0o777).toString(8)}. ${advice}`,
      );
    }
    if (path === dirname(path)) return;
  }
}

const TMPFS_MAGIC = 0x01021994;

/**
 * Where the backend keeps its directory unless told: `/dev/shm` when it is a tmpfs with room for
 * one sandbox's files (directory operations there cost microseconds, on a disk often a
 * millisecond each; files count as the writer's memory either way under bubblewrap), else the OS
 * temp directory.
 */
export function defaultTmpRoot(limits: SandboxLimits): string {
  try {
    const fs = statfsSync("/dev/shm");
    const open = (statSync("/dev/shm").mode & 0o1777) === 0o1777;
    if (
      isTmpfs("/dev/shm") &&
      open &&
      fs.bavail * fs.bsize >= limits.workspaceBytes + limits.tmpBytes
    )
      return "/dev/shm";
  } catch {
    // no /dev/shm (macOS)
  }
  return tmpdir();
}

/** Whether `path` is on a tmpfs (false when it cannot be told). */
export function isTmpfs(path: string): boolean {
  try {
    return statfsSync(path).type === TMPFS_MAGIC;
  } catch {
    return false;
  }
}

/** Removes the directories of dead predecessors in `tmpRoot` (their processes are gone by now). */
export async function sweepStateDirs(tmpRoot: string): Promise<void> {
  for (const name of await readdir(tmpRoot).catch(() => [] as string[])) {
    if (!name.startsWith(STATE_DIR_PREFIX)) continue;
    const instance = name.slice(STATE_DIR_PREFIX.length);
    if (!isInstanceName(instance) || ownerAlive(instance)) continue;
    await removeTree(join(tmpRoot, name)).catch(() => {});
  }
}

/**
 * Makes a call's host directories (isolation none) in `stateDir`: `<name>/workspace`,
 * `<name>/tmp` and the cwd below the workspace, all owned by the sandbox's uid.
 */
export function makeCallDirectories(
  stateDir: string,
  name: string,
  uid: number | undefined,
): { root: string; workspace: string; tmp: string } {
  const root = join(stateDir, name);
  const workspace = join(root, "workspace");
  const tmp = join(root, "tmp");
  const own = (path: string) => {
    if (uid !== undefined) chownSync(path, uid, uid);
  };
  mkdirSync(root, { mode: 0o700 });
  own(root);
  for (const path of [workspace, tmp]) {
    mkdirSync(path, { mode: 0o700 });
    own(path);
  }
  return { root, workspace, tmp };
}
