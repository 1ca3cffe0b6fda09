import { spawnSync } from "node:child_process";
import { lstatSync, mkdirSync, symlinkSync, unlinkSync } from "node:fs";
import { readdir, readlink, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ownerAlive } from "../host/ownership.js";
import type { CgroupSet, CgroupSlot } from "./cgroups.js";
import { killUid, pollUntil } from "./processes.js";
import { processLimitFlag } from "./shell.js";

/** Host uids handed to sandboxes: `first` to `first + count - 1`, one per running sandbox. */
export interface UidRange {
  first: number;
  count: number;
}

/**
 * Where running backends record which sandbox uid each of them holds, machine-wide, so two
 * bridges on one host never give the same uid to two sandboxes: `<dir>/<uid>` is a symlink to the
 * holder's instance name. Root-owned and not writable by others, or sandboxes could forge claims.
 */
export function uidClaimsDir(): string {
  const parent = lstatSync("/run", { throwIfNoEntry: false })?.isDirectory() ? "/run" : tmpdir();
  const dir = join(parent, "remote-task-uids");
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const stat = lstatSync(dir);
  if (!stat.isDirectory() || stat.uid !== 0 || (stat.mode & 0o022) !== 0) {
    throw new Error(
      `${dir} must be a directory owned by root and writable only by root (it records which uid each sandbox holds); remove it and try again.`,
    );
  }
  return dir;
}

/**
 * Runs `trial` (synchronous) as a uid of the range that this backend claims for the moment, then
 * kills whatever of it is left and releases the uid. A trial run as a uid another backend holds
 * would be killed by that backend's teardown (or hold up its drain check).
 */
export function withTrialUid<T>(
  claimsDir: string,
  uids: UidRange,
  instance: string,
  trial: (uid: number) => T,
): T {
  const uid = claimFirstFree(claimsDir, uids.first, uids.first + uids.count, instance);
  if (uid === null) {
    throw new Error(
      `Every uid from ${uids.first} to ${uids.first + uids.count - 1} is held by running sandboxes; none is free for a trial run.`,
    );
  }
  try {
    return trial(uid);
  } finally {
    spawnSync("/bin/sh", ["-c", "kill -KILL -1 2>/dev/null"], {
      uid,
      gid: uid,
      cwd: "/",
      env: {},
      stdio: "ignore",
    });
    try {
      unlinkSync(join(claimsDir, String(uid)));
    } catch {
      // already gone
    }
  }
}

/**
 * Claims the first uid from `from` (inclusive) to `end` (exclusive) that no backend holds, for
 * `instance`; null when every one is held. A claim is held by another backend, or by a dead one
 * whose claims only a sweep (which first kills what still runs under the uid) may release.
 */
function claimFirstFree(
  claimsDir: string,
  from: number,
  end: number,
  instance: string,
): number | null {
  for (let uid = from; uid < end; uid++) {
    try {
      symlinkSync(instance, join(claimsDir, String(uid)));
      return uid;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
  }
  return null;
}

/** A sandbox's place: its host uid (when the bridge drops privileges) and its cgroups. */
export interface Slot {
  readonly index: number;
  readonly uid: number | undefined;
  readonly cgroup: CgroupSlot | undefined;
}

export interface SlotPoolOptions {
  instance: string;
  uids: UidRange | undefined;
  claimsDir: string | undefined;
  cgroups: CgroupSet | undefined;
  limits: { processes: number; memoryBytes: number };
}

/**
 * Slots are made on first need and reused, one sandbox at a time: a slot goes back to the pool
 * only once nothing of its last sandbox is running; one with survivors is retired for good.
 */
export class SlotPool {
  private readonly free: Slot[] = [];
  private readonly all: Slot[] = [];
  private nextUid: number;
  private readonly claimed = new Set<number>();

  constructor(private readonly options: SlotPoolOptions) {
    this.nextUid = options.uids?.first ?? 0;
  }

  /**
   * A free slot, or undefined when every uid of the range is in use. Free slots are reused least
   * recently used first, so a uid's calls are as far apart as the pool allows.
   */
  acquire(): Slot | undefined {
    const reused = this.free.shift();
    if (reused !== undefined) return reused;
    const uid = this.claimUid();
    if (uid === null) return undefined;
    const index = this.all.length;
    let cgroup: CgroupSlot | undefined;
    try {
      cgroup = this.options.cgroups?.slot(index, this.options.limits);
    } catch (error) {
      if (uid !== undefined) this.unclaim(uid);
      throw error;
    }
    const slot: Slot = { index, uid, cgroup };
    this.all.push(slot);
    return slot;
  }

  release(slot: Slot): void {
    if (this.all.includes(slot)) this.free.push(slot);
  }

  /**
   * Whether `acquire` has a slot without waiting for one in use: a free one, or a uid of the range
   * not yet tried (another backend may still have claimed it).
   */
  hasSpare(): boolean {
    const { uids } = this.options;
    return this.free.length > 0 || uids === undefined || this.nextUid < uids.first + uids.count;
  }

  /**
   * Removes the cgroups and uid claims of the free slots. A slot still in use, draining or retired
   * keeps its claim (its uid may still have processes, zombies included) until this process is gone
   * and a sweep releases it; with `killFirst` its processes are sent SIGKILL (at process exit).
   */
  close(killFirst: boolean): void {
    for (const slot of this.all) {
      const free = this.free.includes(slot);
      if (killFirst && !free) slot.cgroup?.killNow();
      try {
        slot.cgroup?.remove();
      } catch {
        // still busy: the next backend's sweep removes it
        continue;
      }
      if (free && slot.uid !== undefined) this.unclaim(slot.uid);
    }
    this.all.length = 0;
    this.free.length = 0;
  }

  /** The next uid no other backend holds; undefined without a range, null when none is left. */
  private claimUid(): number | undefined | null {
    const { uids, claimsDir, instance } = this.options;
    if (uids === undefined || claimsDir === undefined) return undefined;
    const uid = claimFirstFree(claimsDir, this.nextUid, uids.first + uids.count, instance);
    if (uid === null) {
      this.nextUid = uids.first + uids.count;
      return null;
    }
    this.nextUid = uid + 1;
    this.claimed.add(uid);
    return uid;
  }

  private unclaim(uid: number): void {
    if (!this.claimed.delete(uid) || this.options.claimsDir === undefined) return;
    try {
      unlinkSync(join(this.options.claimsDir, String(uid)));
    } catch {
      // already gone
    }
  }
}

/**
 * Releases the uid claims of dead backends, once no process runs under those uids any more (it
 * kills what a cgroup did not hold, e.g. of a predecessor without cgroups).
 *
 * Several backends may sweep at once, and a released uid may be claimed again at any moment, so a
 * sweeper only kills and unlinks under `<uid>.sweep` (made exclusively), after reading the claim
 * again: while the claim still names the same dead holder nobody else can change it (a dead holder
 * does nothing, a new holder cannot claim a name that exists, other sweepers wait for the lock).
 * Without the lock, a sweeper that read a dead claim before another released it would kill the
 * next holder's live sandbox. A sweeper that dies holding a lock leaves that one uid out of use
 * until the lock is removed (or /run is cleared at boot): the safe side of that trade.
 */
export async function sweepUidClaims(
  claimsDir: string,
  instance: string,
  limitMs: number,
): Promise<void> {
  const dead: string[] = [];
  for (const name of await readdir(claimsDir).catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const holder = await readlink(join(claimsDir, name)).catch(() => undefined);
    if (holder !== undefined && !ownerAlive(holder)) dead.push(name);
  }
  if (dead.length === 0) return;
  const flag = processLimitFlag();
  for (const name of dead) {
    const claim = join(claimsDir, name);
    const lock = `${claim}.sweep`;
    try {
      symlinkSync(instance, lock);
    } catch {
      continue; // another sweeper has it
    }
    try {
      const holder = await readlink(claim).catch(() => undefined);
      if (holder === undefined || ownerAlive(holder)) continue;
      if (await pollUntil(() => killUid(Number(name), flag), limitMs, 50))
        await unlink(claim).catch(() => {});
    } finally {
      await unlink(lock).catch(() => {});
    }
  }
}
