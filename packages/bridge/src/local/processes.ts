import type { ChildProcess } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { constants } from "node:os";

/** The `/bin/sh` exit status: the code, or 128 + signal number when killed by a signal. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal === null ? undefined : constants.signals[signal];
  return 128 + (number ?? 0);
}

/** Sends `signal` to a process (`pid`) or a process group (`-pgid`); gone is fine. */
export function signal(target: number, name: NodeJS.Signals): void {
  if (target === process.pid || target === -process.pid || target === 0) return;
  try {
    process.kill(target, name);
  } catch {
    // already gone
  }
}

/** Sends `name` to the process group the child leads (it was spawned detached). */
export function signalGroup(child: ChildProcess, name: NodeJS.Signals): void {
  if (child.pid !== undefined) signal(-child.pid, name);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Waits for `promise` to settle, or `limitMs`, whichever comes first (no timer left behind). */
export async function settleWithin(promise: Promise<unknown>, limitMs: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const over = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, limitMs);
  });
  try {
    await Promise.race([
      promise.then(
        () => {},
        () => {},
      ),
      over,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `done` (first at once, then every `intervalMs`) until it is true or `limitMs` passed. */
export async function pollUntil(
  done: () => Promise<boolean>,
  limitMs: number,
  intervalMs = 10,
): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    if (await done()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(intervalMs);
  }
}

/**
 * Whether process `pid` has ended: gone, or a zombie waiting to be reaped (for the first process
 * of a PID namespace, that state means every other process of the namespace is gone too).
 */
export async function processEnded(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state === "Z" || state === "X";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return true;
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  }
}

/**
 * What identifies the processes of one sandbox when no cgroup holds them. With `zombies`, exited
 * processes not yet reaped count too (they still count against their uid's process limit).
 */
export type ProcessMatch = ({ uids: ReadonlySet<number> } | { pgid: number }) & {
  zombies?: boolean;
};

/**
 * Processes matching `match`, found by reading `/proc/<pid>/status` asynchronously. The last resort where no cgroup or PID namespace holds a sandbox; without `/proc`
 * (macOS) only a process group can be checked, with signal 0.
 */
export async function findProcesses(match: ProcessMatch): Promise<number[]> {
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    if ("pgid" in match) {
      try {
        process.kill(-match.pgid, 0);
        return [-match.pgid];
      } catch {
        return [];
      }
    }
    return [];
  }
  const found: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let status: string;
    try {
      status = await readFile(`/proc/${entry}/status`, "latin1");
    } catch {
      continue;
    }
    const state = /^State:\s+(\S)/m.exec(status)?.[1];
    if ((state === "Z" && match.zombies !== true) || state === "X") continue;
    const hit =
      "uids" in match
        ? match.uids.has(Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]))
        : Number(/^NSpgid:\s+(\d+)/m.exec(status)?.[1]) === match.pgid;
    if (hit) found.push(Number(entry));
  }
  return found;
}

/** SIGKILLs every process matching `match` until none is left, within `limitMs`. */
export async function killMatching(match: ProcessMatch, limitMs: number): Promise<boolean> {
  return pollUntil(async () => {
    const pids = await findProcesses(match);
    for (const pid of pids) signal(pid, "SIGKILL");
    return pids.length === 0;
  }, limitMs);
}
