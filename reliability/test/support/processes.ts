import { readdirSync, readFileSync } from "node:fs";

export interface ProcessInfo {
  pid: number;
  ppid: number;
  pgid: number;
  state: string;
  comm: string;
}

function readProcess(pid: number): ProcessInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // comm is in parentheses and may contain spaces; the fields after it are space separated.
    const close = stat.lastIndexOf(")");
    const comm = stat.slice(stat.indexOf("(") + 1, close);
    const [state = "?", ppid = "0", pgid = "0"] = stat.slice(close + 2).split(" ");
    return { pid, ppid: Number(ppid), pgid: Number(pgid), state, comm };
  } catch {
    return undefined; // exited meanwhile
  }
}

function pids(): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
}

/** Every process on the machine (that still exists when read). */
export function processList(): ProcessInfo[] {
  return pids().flatMap((pid) => readProcess(pid) ?? []);
}

/** Processes whose environment contains `NAME=value` (readable for our own processes). */
export function processesWithEnv(name: string, value: string): ProcessInfo[] {
  const needle = `${name}=${value}\0`;
  return pids().flatMap((pid) => {
    try {
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      if (!`${environ}\0`.includes(needle)) return [];
    } catch {
      return [];
    }
    return readProcess(pid) ?? [];
  });
}

/** Direct and indirect children of `root`. */
export function descendants(root: number): ProcessInfo[] {
  const all = processList();
  const found: ProcessInfo[] = [];
  const frontier = [root];
  while (frontier.length > 0) {
    const parent = frontier.pop();
    for (const info of all) {
      if (info.ppid === parent) {
        found.push(info);
        frontier.push(info.pid);
      }
    }
  }
  return found;
}

/** The argument vector of a process (empty once it is gone). */
export function commandLine(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
  } catch {
    return [];
  }
}
