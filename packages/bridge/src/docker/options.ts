/**
 * The docker backend's own options checked: its limits (the sandbox limits every backend shares,
 * plus cpus and open files), the rlimits by the engine's names, the size of its warm pool.
 */
import { requireIntegerAtLeast } from "@remote-task/internal";
import { DEFAULT_SANDBOX_LIMITS, resolveSandboxLimits } from "../host/limits.js";
import type { DockerLimits } from "./container.js";

/** Limits each container gets unless the deployer sets others; reported by `/health`. */
export const DEFAULT_DOCKER_LIMITS: Readonly<DockerLimits> = Object.freeze({
  ...DEFAULT_SANDBOX_LIMITS,
  openFiles: 4096,
});

/** Containers made ahead of calls unless the deployer says otherwise. */
const DEFAULT_POOL_SIZE = 2;

export function checkLimits(overrides: Partial<DockerLimits> = {}): DockerLimits {
  const { cpus, openFiles, ...shared } = overrides;
  const limits: DockerLimits = {
    ...resolveSandboxLimits(shared),
    openFiles: DEFAULT_DOCKER_LIMITS.openFiles,
  };
  if (cpus !== undefined) {
    if (typeof cpus !== "number" || !Number.isFinite(cpus) || cpus < 0.01) {
      throw new TypeError(`Limit cpus must be a number of at least 0.01; got ${String(cpus)}.`);
    }
    limits.cpus = cpus;
  }
  if (openFiles !== undefined) {
    limits.openFiles = requireIntegerAtLeast("Limit openFiles", openFiles, 16);
  }
  return limits;
}

export function checkPoolSize(size: number | undefined): number {
  if (size === undefined) return DEFAULT_POOL_SIZE;
  if (!Number.isSafeInteger(size) || size < 0 || size > 64) {
    throw new TypeError(`pool must be an integer from 0 to 64; got ${String(size)}.`);
  }
  return size;
}

/** The rlimits an engine knows by name (`docker run --ulimit`); `nofile` is `limits.openFiles`. */
export const ULIMIT_NAMES: readonly string[] = [
  "as",
  "core",
  "cpu",
  "data",
  "fsize",
  "locks",
  "memlock",
  "msgqueue",
  "nice",
  "nproc",
  "rss",
  "rtprio",
  "rttime",
  "sigpending",
  "stack",
];

export function checkUlimits(
  ulimits: Readonly<Record<string, number>> = {},
): Record<string, number> {
  for (const [name, value] of Object.entries(ulimits)) {
    if (!ULIMIT_NAMES.includes(name)) {
      throw new TypeError(
        `ulimit ${name} is not an rlimit the engine knows; use one of ${ULIMIT_NAMES.join(", ")} (the open-files limit is limits.openFiles).`,
      );
    }
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new TypeError(`ulimit ${name} must be a non-negative integer; got ${String(value)}.`);
    }
  }
  return { ...ulimits };
}
