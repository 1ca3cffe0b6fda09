import type { IOType } from "node:child_process";
import { openSync, readdirSync, readFileSync } from "node:fs";

/** `O_CLOEXEC` as `/proc/<pid>/fdinfo` shows it in `flags` (octal). */
const O_CLOEXEC = 0o2000000;

/**
 * Descriptors above 2 that this process holds without close-on-exec. Node opens all of its own
 * with close-on-exec, so these came from whoever started the process (a shell's pipe, a
 * supervisor's socket) and every child would inherit them. Empty where `/proc` is missing.
 */
export function inheritedDescriptors(): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc/self/fd");
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const entry of entries) {
    const fd = Number(entry);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    let info: string;
    try {
      info = readFileSync(`/proc/self/fdinfo/${fd}`, "latin1");
    } catch {
      continue; // the directory listing's own descriptor, closed by now
    }
    const flags = /^flags:\s+([0-7]+)/m.exec(info)?.[1];
    if (flags !== undefined && (Number.parseInt(flags, 8) & O_CLOEXEC) === 0) found.push(fd);
  }
  return found.sort((a, b) => a - b);
}

type Stdio = IOType | "ipc" | number;

/**
 * The `stdio` option for a sandbox's process: `own` for descriptors 0.., and `/dev/null` in place
 * of every inherited descriptor, so none of them reaches the command. Node cannot close a
 * descriptor in a child; it can only give the number something else, and `/dev/null` is nothing.
 */
export function sandboxStdio(own: Stdio[], inherited: readonly number[], devNull: number): Stdio[] {
  const stdio = [...own];
  for (const fd of inherited) {
    while (stdio.length < fd) stdio.push("ignore");
    if (stdio[fd] === undefined || stdio[fd] === "ignore") stdio[fd] = devNull;
  }
  return stdio;
}

/** A read-only `/dev/null` descriptor (close-on-exec in this process). */
export function openDevNull(): number {
  return openSync("/dev/null", "r");
}
