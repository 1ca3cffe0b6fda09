/**
 * The uid (and gid) each container's command runs as unless the deployer names a user: one per
 * container, from a range no account of the host has, taken in turn, so that per-uid kernel state
 * and limits (inotify instances, POSIX message queue bytes, the process count, `/proc/<pid>`
 * access) are shared neither with a host account nor with another call of this bridge (as long as
 * fewer containers than the range holds are alive at once).
 *
 * The range, 60001..64999, is above `UID_MAX` of Debian's and Fedora's `login.defs` and below
 * `nobody` (65534), so it also lies within the 65,536 ids a rootless engine's user namespace maps
 * (where each is a subordinate id, no account either). Ids that this machine's `/etc/passwd` gives
 * an account are skipped.
 */

import { readFileSync } from "node:fs";

export const CONTAINER_UIDS = { first: 60_001, last: 64_999 } as const;

/** The uids of this machine's accounts (none when `/etc/passwd` cannot be read). */
export function hostAccountUids(passwd = "/etc/passwd"): Set<number> {
  let text = "";
  try {
    text = readFileSync(passwd, "utf8");
  } catch {
    // no accounts file: nothing to skip
  }
  const uids = new Set<number>();
  for (const line of text.split("\n")) {
    const uid = Number(line.split(":")[2]);
    if (line !== "" && Number.isSafeInteger(uid)) uids.add(uid);
  }
  return uids;
}

/** A source of container users (`uid:gid`), starting at a random place in the range. */
export function containerUsers(taken: ReadonlySet<number> = hostAccountUids()): () => string {
  const size = CONTAINER_UIDS.last - CONTAINER_UIDS.first + 1;
  let offset = Math.floor(Math.random() * size);
  return () => {
    for (let tries = 0; tries < size; tries++) {
      const uid = CONTAINER_UIDS.first + (offset++ % size);
      if (!taken.has(uid)) return `${uid}:${uid}`;
    }
    throw new Error(
      `Every uid from ${CONTAINER_UIDS.first} to ${CONTAINER_UIDS.last} is a host account.`,
    );
  };
}
