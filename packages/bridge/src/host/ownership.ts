/**
 * Who owns what a bridge leaves on the machine. Every directory, cgroup and uid claim a backend
 * creates carries its instance name, `<pid>.<start time>.<random>`: the process that created it and
 * when that process started (so a reused pid does not pass for the owner), plus random hex for
 * several backends in one process (even from two copies of this module). A backend that starts
 * sweeps what belongs to dead owners and never touches what a live one owns.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";

/**
 * Start time of a running process in clock ticks since boot (`/proc/<pid>/stat` field 22);
 * undefined when it is gone or a zombie (dead, only not reaped yet).
 */
function startTime(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  } catch {
    return undefined;
  }
  // "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[0] === "Z" || fields[0] === "X" ? undefined : fields[19];
}

const INSTANCE_PATTERN = /^(\d+)\.(\d+|x)\.([0-9a-f]+)$/;
const ownStart = startTime(process.pid) ?? "x";

/** A fresh instance name for a backend of this process. */
export function newInstanceName(): string {
  return `${process.pid}.${ownStart}.${randomBytes(4).toString("hex")}`;
}

/** True for names made by {@link newInstanceName} (anywhere on this machine). */
export function isInstanceName(name: string): boolean {
  return INSTANCE_PATTERN.test(name);
}

/** Whether the process that made `name` is still running (a live owner keeps what it made). */
export function ownerAlive(name: string): boolean {
  const match = INSTANCE_PATTERN.exec(name);
  if (match === null) return true;
  const pid = Number(match[1]);
  if (pid === process.pid) return match[2] === ownStart;
  if (match[2] !== "x") return startTime(pid) === match[2];
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

const exitCleanups = new Set<() => void>();

/**
 * Runs `cleanup` (synchronous) if the process exits normally while it is registered, so a backend
 * that was never closed still removes what it made. Returns the function that unregisters it.
 */
export function cleanUpAtExit(cleanup: () => void): () => void {
  if (exitCleanups.size === 0) process.once("exit", runExitCleanups);
  exitCleanups.add(cleanup);
  return () => {
    exitCleanups.delete(cleanup);
    if (exitCleanups.size === 0) process.off("exit", runExitCleanups);
  };
}

function runExitCleanups(): void {
  for (const cleanup of [...exitCleanups]) {
    try {
      cleanup();
    } catch {
      // best effort: the next backend to start sweeps what is left
    }
  }
  exitCleanups.clear();
}
