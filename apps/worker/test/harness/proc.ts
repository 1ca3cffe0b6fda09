/** Reading processes from /proc: descendants, names, memory. */
import { readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";

/**
 * Runs `work` and returns how far the resident memory of process `pid` rose above where it
 * stood before, at its highest (the kernel's high-water mark, reset first).
 */
export async function peakRssGrowth<T>(
  pid: number,
  work: () => Promise<T>,
): Promise<{ value: T; growthBytes: number }> {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
  const before = statusKiB(pid, "VmRSS");
  const value = await work();
  return { value, growthBytes: (statusKiB(pid, "VmHWM") - before) * 1024 };
}

function statusKiB(pid: number, field: string): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (match === null) throw new Error(`no ${field} for process ${pid}`);
  return Number(match[1]);
}

export function commandName(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const pid of pids()) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(parent, [...(children.get(parent) ?? []), pid]);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    for (const child of children.get(queue.shift() as number) ?? []) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

function pids(): number[] {
  return readdirSync("/proc")
    .map(Number)
    .filter((pid) => Number.isInteger(pid));
}

/**
 * The PID namespace bwrap `pid` created (`pid:[inode]`), read from its first child once that
 * exists (within 2 s); `undefined` if it never appears.
 */
export async function pidNamespaceOf(pid: number): Promise<string | undefined> {
  const own = readlinkSync(`/proc/${process.pid}/ns/pid`);
  const deadline = Date.now() + 2_000;
  while (Date.now() < deadline) {
    try {
      const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
      const first = children.split(" ")[0];
      if (first) {
        const namespace = readlinkSync(`/proc/${first}/ns/pid`);
        if (namespace !== own) return namespace;
      }
    } catch {
      return undefined;
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return undefined;
}

/**
 * Pids of the live processes in PID namespace `namespace`. Zombies do not count: they are dead
 * and wait for the host's init to reap them, which can take seconds on a loaded machine.
 */
export function processesIn(namespace: string): number[] {
  return pids().filter((pid) => {
    try {
      return readlinkSync(`/proc/${pid}/ns/pid`) === namespace && !isZombie(pid);
    } catch {
      return false;
    }
  });
}

function isZombie(pid: number): boolean {
  // "pid (comm) state ..."; comm may contain spaces and parentheses.
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  return state === "Z" || state === "X";
}

/** Pids of processes whose command line contains `marker` (container processes included). */
export function processesWith(marker: string): number[] {
  return pids().filter((pid) => {
    if (pid === process.pid) return false;
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker);
    } catch {
      return false;
    }
  });
}
