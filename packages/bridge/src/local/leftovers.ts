/**
 * What a call under isolation none leaves in the host's shared writable places. Without a mount
 * namespace its command sees the host's `/tmp`, `/var/tmp`, `/dev/shm` and `/dev/mqueue`; with a
 * uid per sandbox, whatever it left there is owned by that uid, and the next call given the uid
 * could read it (and files in `/dev/shm` stay charged to the slot's memory cgroup). Once every
 * process of the sandbox is gone, and before the slot is handed out again, every entry owned by
 * the uid under those directories is removed (on their own file system only, never following a
 * symbolic link).
 */
import { lstat, readdir, rmdir, unlink } from "node:fs/promises";
import { join } from "node:path";

/** The host's directories every uid may write to. */
const SHARED_WRITABLE_DIRS: readonly string[] = ["/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"];

/**
 * Removes what `uid` owns below `dir` (not `dir` itself); returns how many entries went. The uid
 * can only have made entries in directories it may write to: its own, and world-writable ones;
 * no other directory is looked into (a host's /tmp may hold large trees of others).
 */
async function removeOwned(dir: string, uid: number, device: number): Promise<number> {
  let removed = 0;
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const name of names) {
    const path = join(dir, name);
    const stat = await lstat(path).catch(() => undefined);
    if (stat === undefined || stat.dev !== device) continue;
    const owned = stat.uid === uid;
    if (stat.isDirectory()) {
      if (owned || (stat.mode & 0o002) !== 0) removed += await removeOwned(path, uid, device);
      if (owned && (await succeeded(rmdir(path)))) removed++;
    } else if (owned && (await succeeded(unlink(path)))) removed++;
  }
  return removed;
}

function succeeded(operation: Promise<unknown>): Promise<boolean> {
  return operation.then(
    () => true,
    () => false,
  );
}

/** Removes every entry `uid` owns under the shared writable directories that exist here. */
export async function removeLeftovers(
  uid: number,
  dirs: readonly string[] = SHARED_WRITABLE_DIRS,
): Promise<number> {
  let removed = 0;
  for (const dir of dirs) {
    const stat = await lstat(dir).catch(() => undefined);
    if (stat?.isDirectory()) removed += await removeOwned(dir, uid, stat.dev);
  }
  return removed;
}
