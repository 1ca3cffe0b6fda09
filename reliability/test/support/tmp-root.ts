import { chmod, mkdtemp, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A fresh `tmpRoot` for local backends, traversable by other users: a root bridge runs each
 * sandbox as an unprivileged uid, which must reach the sandbox's directory.
 */
export async function makeTmpRoot(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await chmod(dir, 0o711);
  return dir;
}

/**
 * Per-call directories not yet removed by the backends using `tmpRoot`: the entries of each
 * backend's own directory (`remote-task-<instance>`) but its passwd and group files, and anything
 * else in `tmpRoot`.
 */
export async function leftoverDirs(tmpRoot: string): Promise<string[]> {
  const left: string[] = [];
  for (const name of await readdir(tmpRoot)) {
    if (!name.startsWith("remote-task-")) {
      left.push(name);
      continue;
    }
    for (const entry of await readdir(join(tmpRoot, name)))
      if (entry !== "passwd" && entry !== "group") left.push(join(name, entry));
  }
  return left;
}
