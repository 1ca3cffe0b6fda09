/**
 * The engine's own process-count limit, for the message of a container start the engine refused
 * with `error setting rlimit type 6` (RLIMIT_NPROC): an engine without CAP_SYS_RESOURCE (Podman
 * as root in a container, say) cannot raise a container's limit above its own hard one, and
 * Podman asks for more by default. When the engine listens on a unix socket of this machine, the
 * process holding that socket is found through /proc and its hard limit read; elsewhere (TCP, no
 * /proc, another user's process) the message says where to look instead.
 */

import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import type { EngineEndpoint } from "./engine.js";

/** True for an engine's refusal to set a container's process-count rlimit. */
export function isNprocRefusal(message: string): boolean {
  return /setting rlimit type 6\b|RLIMIT_NPROC/i.test(message);
}

/** The inode of the listening unix socket at `path`, from /proc/net/unix. */
function socketInode(path: string): string | undefined {
  const lines = readFileSync("/proc/net/unix", "utf8").split("\n");
  for (const line of lines) {
    const fields = line.trim().split(/\s+/);
    if (fields.length >= 8 && fields[7] === path) return fields[6];
  }
  return undefined;
}

/** The process that holds the socket with inode `inode` among its open files. */
function holderOf(inode: string): number | undefined {
  const link = `socket:[${inode}]`;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue; // gone, or another user's
    }
    for (const fd of fds) {
      try {
        if (readlinkSync(`/proc/${entry}/fd/${fd}`) === link) return Number(entry);
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}

/** The hard `Max processes` of process `pid`, or undefined when unlimited or unreadable. */
function hardProcessLimit(pid: number): number | undefined {
  const line = readFileSync(`/proc/${pid}/limits`, "utf8")
    .split("\n")
    .find((l) => l.startsWith("Max processes"));
  const hard = line?.split(/\s{2,}/)[2];
  return hard !== undefined && /^\d+$/.test(hard) ? Number(hard) : undefined;
}

/**
 * The hard process-count limit of the engine listening at `endpoint`, when it is a unix socket
 * of this machine whose holder this process may look at; undefined otherwise.
 */
export function engineProcessLimit(endpoint: EngineEndpoint): number | undefined {
  if (!("socketPath" in endpoint)) return undefined;
  try {
    const inode = socketInode(endpoint.socketPath);
    const pid = inode === undefined ? undefined : holderOf(inode);
    return pid === undefined ? undefined : hardProcessLimit(pid);
  } catch {
    return undefined;
  }
}
