import { DISPLAY_MAX_BYTES, type Limits, limitsSchema } from "@remote-task/protocol";

/** Limits a bridge enforces when none are configured; reported by `GET /health`. */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxRequestBytes: 2_097_152,
  maxCommandBytes: 65_536,
  maxEnvEntries: 64,
  maxEnvEntryBytes: 8_192,
  maxTimeoutSeconds: 3_600,
  maxOutputBytes: 1_048_576,
  maxStdinBytes: 1_048_576,
});

/**
 * Smallest per-stream cap a request may ask for: the client's 50 KiB display window plus one
 * UTF-8 character, so the client can always show a full window and tell that it was truncated.
 */
export const MIN_OUTPUT_CAP_BYTES = DISPLAY_MAX_BYTES + 4;

/** Merges `overrides` into {@link DEFAULT_LIMITS}; throws a `TypeError` naming a bad value. */
export function resolveLimits(overrides: Partial<Limits> = {}): Limits {
  const merged = { ...DEFAULT_LIMITS, ...overrides };
  const parsed = limitsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new TypeError(
      `Invalid bridge limit ${issue?.path.join(".") ?? ""}: ${issue?.message ?? "invalid value"}.`,
    );
  }
  return parsed.data;
}

/** Bytes of each stream retained for one call: the request may lower the bridge's cap, within reason. */
export function outputCapFor(limits: Limits, requested: number | undefined): number {
  const wanted = Math.max(requested ?? limits.maxOutputBytes, MIN_OUTPUT_CAP_BYTES);
  return Math.min(wanted, limits.maxOutputBytes);
}

/**
 * Default most bytes of events queued for one streamed call's reader (256 KiB); beyond them the
 * call skips output until the reader catches up (see `callEventStream`).
 */
export const DEFAULT_STREAM_BUFFER_BYTES = 262_144;

/** How many calls a bridge runs at once and lets wait; see {@link resolveAdmission}. */
export interface AdmissionOptions {
  /** Most calls running at once; a call holds its slot until its sandbox is destroyed. */
  maxConcurrent?: number | undefined;
  /** Most calls waiting for a slot; beyond them `/exec` answers 429 `capacity_exceeded`. */
  maxQueued?: number | undefined;
}

/** The admission a bridge enforces; reported by `/health` with its load. */
export interface AdmissionSettings {
  maxConcurrent: number;
  maxQueued: number;
}

/** Default calls running at once per core of the machine (most wait on their command, not the CPU). */
export const CONCURRENT_CALLS_PER_CORE = 4;
/** Default calls waiting per call running. */
export const QUEUED_CALLS_PER_RUNNING = 4;

/**
 * The default admission for a machine with `cores` cores (default: `navigator.hardwareConcurrency`
 * where the runtime has it, else 1): {@link CONCURRENT_CALLS_PER_CORE} calls per core, and
 * {@link QUEUED_CALLS_PER_RUNNING} waiting per running call. 2 cores: 8 running, 32 waiting.
 */
export function defaultAdmission(cores: number = machineCores()): AdmissionSettings {
  const maxConcurrent = Math.max(1, Math.floor(cores)) * CONCURRENT_CALLS_PER_CORE;
  return { maxConcurrent, maxQueued: maxConcurrent * QUEUED_CALLS_PER_RUNNING };
}

function machineCores(): number {
  const cores = (globalThis as { navigator?: { hardwareConcurrency?: unknown } }).navigator
    ?.hardwareConcurrency;
  return typeof cores === "number" && Number.isInteger(cores) && cores > 0 ? cores : 1;
}

/**
 * Fills what `options` leaves out from {@link defaultAdmission} (the waiting room follows a given
 * `maxConcurrent`); throws a `TypeError` naming a bad value.
 */
export function resolveAdmission(options: AdmissionOptions = {}): AdmissionSettings {
  const { maxConcurrent, maxQueued } = options;
  if (maxConcurrent !== undefined && (!Number.isSafeInteger(maxConcurrent) || maxConcurrent < 1)) {
    throw new TypeError(
      `admission.maxConcurrent must be a whole number of at least 1; got ${maxConcurrent}.`,
    );
  }
  if (maxQueued !== undefined && (!Number.isSafeInteger(maxQueued) || maxQueued < 0)) {
    throw new TypeError(
      `admission.maxQueued must be a whole number of at least 0; got ${maxQueued}.`,
    );
  }
  const running = maxConcurrent ?? defaultAdmission().maxConcurrent;
  return { maxConcurrent: running, maxQueued: maxQueued ?? running * QUEUED_CALLS_PER_RUNNING };
}
