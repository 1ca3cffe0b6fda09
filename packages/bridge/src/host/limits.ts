import { requireIntegerAtLeast } from "@remote-task/internal";
/** Per-sandbox limits of the local backend. */
export interface SandboxLimits {
  /** Processes and threads running at once in one sandbox. */
  processes: number;
  /** Memory of one sandbox, in bytes (tmpfs content included: it is memory). */
  memoryBytes: number;
  /** Size of `/workspace`, in bytes. */
  workspaceBytes: number;
  /** Size of `/tmp` (and under bubblewrap of `/dev/shm`), in bytes. */
  tmpBytes: number;
  /**
   * Open files of one process (`RLIMIT_NOFILE`, soft and hard). The kernel's file table is
   * shared by the whole host and has no per-sandbox limit: one sandbox can hold at most
   * `processes` x `openFiles` of it (256 x 512 = 131,072 by default).
   */
  openFiles: number;
}

const MiB = 1024 * 1024;

/** Limits each sandbox gets unless the deployer sets others; reported by `/health`. */
export const DEFAULT_SANDBOX_LIMITS: Readonly<SandboxLimits> = Object.freeze({
  processes: 256,
  memoryBytes: 2048 * MiB,
  workspaceBytes: 1024 * MiB,
  tmpBytes: 256 * MiB,
  openFiles: 512,
});

/** Host uids for sandboxes when the bridge runs as root: one per sandbox running at a time. */
export const DEFAULT_SANDBOX_UIDS = Object.freeze({ first: 1_900_000_000, count: 1024 });

/** Smallest value accepted for each limit: below it a shell cannot start. */
const MINIMUM: Readonly<SandboxLimits> = {
  processes: 4,
  memoryBytes: 16 * MiB,
  workspaceBytes: MiB,
  tmpBytes: MiB,
  openFiles: 16,
};

/** Merges `overrides` into the defaults; throws a `TypeError` naming a bad value. */
export function resolveSandboxLimits(overrides: Partial<SandboxLimits> = {}): SandboxLimits {
  const limits = { ...DEFAULT_SANDBOX_LIMITS };
  for (const [name, value] of Object.entries(overrides) as [keyof SandboxLimits, unknown][]) {
    if (!(name in MINIMUM)) {
      throw new TypeError(
        `Unknown sandbox limit ${String(name)}; the limits are ${Object.keys(MINIMUM).join(", ")}.`,
      );
    }
    if (value === undefined) continue;
    limits[name] = requireIntegerAtLeast(`Sandbox limit ${name}`, value, MINIMUM[name]);
  }
  return limits;
}

/** Validates a uid range for sandboxes: unprivileged, within the 32-bit uid space. */
export function checkUidRange(range: { first: number; count: number }): void {
  const { first, count } = range;
  const last = first + count - 1;
  if (
    !Number.isSafeInteger(first) ||
    !Number.isSafeInteger(count) ||
    first < 1000 ||
    count < 1 ||
    last > 4_294_967_294 ||
    (first <= 65_534 && last >= 65_534)
  ) {
    throw new TypeError(
      `uids must be a range of unprivileged uids (first >= 1000, count >= 1, last <= 4294967294, not including 65534 "nobody"); got first ${first}, count ${count}.`,
    );
  }
}
