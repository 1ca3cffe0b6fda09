import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
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

/** A pause; `background` ones do not keep the process alive. */
function sleep(ms: number, background: boolean): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (background) timer.unref();
  });
}

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

/**
 * Polls `done` (first at once, then every `intervalMs`) until it is true or `limitMs` passed. A
 * `background` poll does not keep the process alive (nobody waits for its answer to exit).
 */
export async function pollUntil(
  done: () => Promise<boolean>,
  limitMs: number,
  intervalMs = 10,
  background = false,
): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    if (await done()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(intervalMs, background);
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

/** True once no process of group `pgid` is left (zombies not yet reaped still count). */
export function groupGone(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return false;
  } catch {
    return true;
  }
}

/**
 * Kills every process of `uid` but the caller (`kill -KILL -1` run as that uid) and tells whether
 * none is left, zombies included: the caller then checks that it may fork with a process limit of
 * 2 for its uid (itself and the child). Reaches a sandbox's processes where no cgroup holds them,
 * without reading `/proc`, at the price of a program start, made only in that fallback.
 * `processFlag` is the shell's `ulimit` flag for the process count; without one the answer is
 * only that the processes were sent SIGKILL.
 */
export function killUid(uid: number, processFlag: string | undefined): Promise<boolean> {
  const check = processFlag === undefined ? "" : `; ulimit ${processFlag} 2; (:)`;
  return new Promise((resolve) => {
    const child = spawn("/bin/sh", ["-c", `kill -KILL -1 2>/dev/null${check}`], {
      uid,
      gid: uid,
      cwd: "/",
      env: {},
      stdio: "ignore",
    });
    child.once("error", () => resolve(false));
    child.once("exit", (code) => resolve(code === 0));
  });
}
