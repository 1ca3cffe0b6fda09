import type { OutputChunk } from "../backend.js";
import type { SandboxLimits } from "../host/limits.js";
import type { CgroupSlot } from "./cgroups.js";

const MiB = 1024 * 1024;

/**
 * Stderr notes for the limits a call ran into (once the command has exited and its cgroup's
 * counters are final), so a killed command is not a mystery.
 */
export async function limitNotes(
  exit: Promise<unknown>,
  cgroup: CgroupSlot | undefined,
  before: ReturnType<CgroupSlot["counters"]> | undefined,
  limits: SandboxLimits,
): Promise<OutputChunk[]> {
  if (cgroup === undefined || before === undefined) return [];
  await exit.catch(() => {});
  const after = cgroup.counters();
  const notes: OutputChunk[] = [];
  if (after.oomKills > before.oomKills) {
    notes.push({
      stream: "stderr",
      data: `remote-task: the sandbox reached its memory limit (${Math.round(limits.memoryBytes / MiB)} MiB) and the kernel killed a process of the command (exit status 137 is SIGKILL).\n`,
    });
  }
  if (after.pidsMaxHits > before.pidsMaxHits) {
    notes.push({
      stream: "stderr",
      data: `remote-task: the sandbox reached its process limit (${limits.processes} processes and threads); a process could not be started.\n`,
    });
  }
  return notes;
}

/**
 * What isolation none does not protect, one line each, for whoever chose it to print (the CLI on
 * an explicit `--isolation none`, as the `auto` fallback's warning does). `uidPerSandbox`: the
 * bridge runs as root, so each sandbox gets a uid of its own.
 */
export function isolationNoneGaps(uidPerSandbox: boolean): string[] {
  return [
    "no namespace but IPC: commands see the host's whole file system (whatever their uid may read), its process list and its network, the host's own services included; no network policy is enforced",
    ...(uidPerSandbox
      ? [
          "what a call leaves in /tmp, /var/tmp, /dev/shm and /dev/mqueue is removed after it, and each call gets IPC objects of its own and fresh kernel keyrings (when Perl is installed); files in other world-writable directories (such as /run/lock) are not removed",
        ]
      : [
          "every command runs as the bridge's own uid: it can read the bridge's files and the environment of its processes, signal the bridge, and read or change what other calls leave anywhere",
        ]),
    "limits are per process (rlimits) unless cgroups are available; the PTYs, AIO contexts and file table of the host are shared with every other process",
  ];
}
