import type { OutputChunk } from "../backend.js";
import type { CgroupSlot } from "./cgroups.js";
import type { SandboxLimits } from "./limits.js";

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
