/**
 * The end of a sandbox: `terminate` stops its processes (SIGTERM, SIGKILL after the grace period,
 * by PID namespace, cgroup, uid or process group, whichever the backend has), and
 * `releaseWhenDrained` hands its slot out again only once nothing of it is left to reap.
 */
import { groupGone, killUid, pollUntil, processEnded, settleWithin, signal } from "./processes.js";
import type { Sandbox } from "./sandbox.js";
import { EXIT_WAIT_MS, type LocalHost } from "./setup.js";
import type { Slot } from "./slots.js";

/** How long a slot may wait for its last processes to be reaped before it is retired. */
const DRAIN_LIMIT_MS = 60_000;

/**
 * Sends `name` to the sandbox's processes, not to bubblewrap's own (it would take them all down
 * at once). Inside bubblewrap the command's first process may not be forked yet: keep trying
 * until `deadline` while the sandbox is there.
 */
async function signalSandbox(
  host: LocalHost,
  sandbox: Sandbox,
  name: NodeJS.Signals,
  deadline: number,
): Promise<void> {
  const proc = sandbox.proc;
  const cgroup = sandbox.slot?.cgroup;
  if (proc === undefined) return;
  if (cgroup === undefined) return signal(-proc.pid, name);
  if (host.isolation === "none") {
    signal(-proc.pid, name);
    cgroup.signal(name);
    return;
  }
  const nsInit = await sandbox.nsInit;
  await pollUntil(
    async () => cgroup.signal(name, nsInit) > 0 || proc.exited,
    deadline - Date.now(),
    5,
  );
}

/**
 * SIGTERM to the sandbox's processes, SIGKILL to all after the grace period; resolves once none
 * is left (true) or the wait ran out (false).
 */
export async function terminate(host: LocalHost, sandbox: Sandbox): Promise<boolean> {
  const proc = sandbox.proc;
  if (proc === undefined) return true;
  if (!proc.exited) {
    const deadline = Date.now() + host.killGraceMs;
    await signalSandbox(host, sandbox, "SIGTERM", deadline);
    await settleWithin(sandbox.exited, Math.max(0, deadline - Date.now()));
  }
  const limitMs = host.killGraceMs + EXIT_WAIT_MS;
  const cgroup = sandbox.slot?.cgroup;
  if (host.isolation === "bwrap") {
    // Killing the namespace's first process makes the kernel kill every other one: none can run
    // again. The slot waits until the kernel is done (see releaseWhenDrained).
    const nsInit = await sandbox.nsInit;
    signal(nsInit ?? -proc.pid, "SIGKILL");
    await sandbox.exited;
    return true;
  }
  signal(-proc.pid, "SIGKILL");
  const groupKilled = cgroup?.killAll(limitMs);
  await sandbox.exited;
  if (groupKilled !== undefined) return groupKilled;
  const uid = sandbox.slot?.uid;
  if (uid !== undefined) {
    // Escapes from the process group are still processes of the sandbox's uid.
    sandbox.drained = await killUid(uid, host.processFlag);
    return true;
  }
  return pollUntil(async () => groupGone(proc.pid), limitMs);
}

/**
 * Hands the slot out again once its last sandbox's processes are reaped, not only dead: until
 * then they count against the slot's process limit (cgroup or uid). Orphans are reaped by the
 * host's init, which may take a moment; meanwhile other slots serve. Under bubblewrap the
 * namespace's first process reaps all others before it ends, and `terminate` waited for that:
 * at most that one process is left to reap. Resolves once the slot is released or retired.
 */
export async function releaseWhenDrained(
  host: LocalHost,
  slot: Slot,
  nsInit: number | undefined,
): Promise<void> {
  const { cgroup, uid } = slot;
  const { isolation } = host;
  if (isolation === "none" && (cgroup === undefined ? uid === undefined : cgroup.drained()))
    return host.releaseSlot(slot);
  const drained =
    isolation === "bwrap"
      ? async () => nsInit === undefined || processEnded(nsInit)
      : cgroup !== undefined
        ? async () => cgroup.drained()
        : uid !== undefined
          ? () => killUid(uid, host.processFlag)
          : async () => true;
  // Each check of a uid starts a program: look less often.
  const interval = isolation === "bwrap" ? 2 : cgroup === undefined ? 100 : 20;
  if (await pollUntil(drained, DRAIN_LIMIT_MS, interval, true)) await host.releaseSlot(slot);
}
