import { requireIntegerAtLeast } from "@remote-task/internal";
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
  /**
   * Most bytes the waiting calls may hold, each counted by {@link queuedCallBytes}; beyond them
   * `/exec` answers 429 `capacity_exceeded` too (default {@link DEFAULT_MAX_QUEUED_BYTES}).
   */
  maxQueuedBytes?: number | undefined;
  /**
   * Most calls one client may have waiting (default half of `maxQueued`, at least 1); beyond them
   * its `/exec` answers 429 `capacity_exceeded`. A client is what the host says sent the request
   * (`BridgeRequestContext.client`: the Node host gives the connection's source address);
   * requests whose host names none are bounded by the whole queue only.
   */
  maxQueuedPerClient?: number | undefined;
}

/** The admission a bridge enforces; reported by `/health` with its load (all but the bytes). */
export interface AdmissionSettings {
  maxConcurrent: number;
  maxQueued: number;
  maxQueuedBytes: number;
  /** Filled by {@link resolveAdmission}; undefined: half of `maxQueued`, at least 1. */
  maxQueuedPerClient?: number | undefined;
}

/** Default calls running at once per core of the machine (most wait on their command, not the CPU). */
export const CONCURRENT_CALLS_PER_CORE = 4;
/**
 * Default calls waiting per call running: a burst waits its turn rather than being refused (2
 * cores: 8 running, 512 waiting), within {@link DEFAULT_MAX_QUEUED_BYTES}.
 */
export const QUEUED_CALLS_PER_RUNNING = 64;
/** Default most bytes the waiting calls hold (64 MiB); see {@link queuedCallBytes}. */
export const DEFAULT_MAX_QUEUED_BYTES = 64 * 1024 * 1024;
/**
 * What a waiting call is charged beyond its command, env and stdin: its request, call and
 * connection objects (an allowance, above what they were measured to take).
 */
export const QUEUED_CALL_OVERHEAD_BYTES = 16 * 1024;

const encoder = new TextEncoder();

/**
 * The bytes a waiting call holds, as the queue counts them: the UTF-8 bytes of its command, env
 * names and values, and stdin, plus {@link QUEUED_CALL_OVERHEAD_BYTES}. Within the default limits
 * at most 64 KiB + 64 x 8 KiB + 1 MiB + 16 KiB, about 1.6 MiB; a plain command, about 16 KiB.
 */
export function queuedCallBytes(call: {
  command: string;
  env: Readonly<Record<string, string>>;
  stdin?: Uint8Array | undefined;
}): number {
  let bytes = QUEUED_CALL_OVERHEAD_BYTES + encoder.encode(call.command).byteLength;
  for (const [name, value] of Object.entries(call.env)) {
    bytes += encoder.encode(name).byteLength + encoder.encode(value).byteLength;
  }
  return bytes + (call.stdin?.byteLength ?? 0);
}

/**
 * The default admission for a machine with `cores` cores (default: `navigator.hardwareConcurrency`
 * where the runtime has it, else 1): {@link CONCURRENT_CALLS_PER_CORE} calls per core,
 * {@link QUEUED_CALLS_PER_RUNNING} waiting per running call, holding at most
 * {@link DEFAULT_MAX_QUEUED_BYTES}. 2 cores: 8 running, 512 waiting.
 */
export function defaultAdmission(cores: number = machineCores()): AdmissionSettings {
  const maxConcurrent = Math.max(1, Math.floor(cores)) * CONCURRENT_CALLS_PER_CORE;
  const maxQueued = maxConcurrent * QUEUED_CALLS_PER_RUNNING;
  return {
    maxConcurrent,
    maxQueued,
    maxQueuedBytes: DEFAULT_MAX_QUEUED_BYTES,
    maxQueuedPerClient: defaultQueuedPerClient(maxQueued),
  };
}

/** The default share of the queue one client may hold: half of it, at least one call. */
export function defaultQueuedPerClient(maxQueued: number): number {
  return Math.max(1, Math.ceil(maxQueued / 2));
}

function machineCores(): number {
  const cores = (globalThis as { navigator?: { hardwareConcurrency?: unknown } }).navigator
    ?.hardwareConcurrency;
  return typeof cores === "number" && Number.isInteger(cores) && cores > 0 ? cores : 1;
}

function wholeNumber(name: string, value: number | undefined, least: number): void {
  if (value !== undefined) requireIntegerAtLeast(`admission.${name}`, value, least);
}

/**
 * Fills what `options` leaves out from {@link defaultAdmission} (the waiting room follows a given
 * `maxConcurrent`); throws a `TypeError` naming a bad value.
 */
export function resolveAdmission(options: AdmissionOptions = {}): AdmissionSettings {
  const { maxConcurrent, maxQueued, maxQueuedBytes, maxQueuedPerClient } = options;
  wholeNumber("maxConcurrent", maxConcurrent, 1);
  wholeNumber("maxQueued", maxQueued, 0);
  wholeNumber("maxQueuedBytes", maxQueuedBytes, 0);
  wholeNumber("maxQueuedPerClient", maxQueuedPerClient, 1);
  const running = maxConcurrent ?? defaultAdmission().maxConcurrent;
  const waiting = maxQueued ?? running * QUEUED_CALLS_PER_RUNNING;
  return {
    maxConcurrent: running,
    maxQueued: waiting,
    maxQueuedBytes: maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES,
    maxQueuedPerClient: maxQueuedPerClient ?? defaultQueuedPerClient(waiting),
  };
}

/** What a bridge keeps of its calls and for how long (durable calls); see {@link resolveDurable}. */
export interface DurableOptions {
  /** Seconds a call's outcome is kept after it ends (default 600). */
  keptSeconds?: number | undefined;
  /** Most calls kept at once: detached calls in flight and kept outcomes (default 4096). */
  maxKept?: number | undefined;
  /** Most bytes the kept calls are counted at (default 128 MiB; see {@link keptCallBytes}). */
  maxKeptBytes?: number | undefined;
  /**
   * Seconds a call without `detach` keeps running after its caller's connection dropped, for the
   * caller to re-attach; then it is cancelled (default 0 in the core, 10 in the Node host).
   */
  disconnectGraceSeconds?: number | undefined;
}

export type DurableSettings = { [K in keyof DurableOptions]-?: number };

/** Default seconds an outcome is kept (10 minutes). */
export const DEFAULT_KEPT_SECONDS = 600;
/** Default most calls kept. */
export const DEFAULT_MAX_KEPT = 4_096;
/** Default most bytes of kept calls (128 MiB). */
export const DEFAULT_MAX_KEPT_BYTES = 128 * 1024 * 1024;
/** Default grace of the Node host for a caller that lost its connection. */
export const DEFAULT_NODE_DISCONNECT_GRACE_SECONDS = 10;
/** What a kept call is charged beyond its command and retained output (its entry, its id). */
export const KEPT_CALL_OVERHEAD_BYTES = 1_024;

/**
 * The bytes a kept call is counted at: its command, the retained output of a result (or two
 * caps, `cap` each, for a detached call still running) and {@link KEPT_CALL_OVERHEAD_BYTES}.
 */
export function keptCallBytes(command: string, output: number): number {
  return KEPT_CALL_OVERHEAD_BYTES + encoder.encode(command).byteLength + output;
}

function nonNegative(name: string, value: number | undefined, whole: boolean): void {
  if (
    value !== undefined &&
    (!Number.isFinite(value) || value < 0 || (whole && !Number.isSafeInteger(value)))
  ) {
    throw new TypeError(
      `durable.${name} must be ${whole ? "a whole number" : "a number"} of at least 0; got ${value}.`,
    );
  }
}

/** Fills what `options` leaves out with the defaults; throws a `TypeError` naming a bad value. */
export function resolveDurable(options: DurableOptions = {}): DurableSettings {
  nonNegative("keptSeconds", options.keptSeconds, false);
  nonNegative("maxKept", options.maxKept, true);
  nonNegative("maxKeptBytes", options.maxKeptBytes, true);
  nonNegative("disconnectGraceSeconds", options.disconnectGraceSeconds, false);
  return {
    keptSeconds: options.keptSeconds ?? DEFAULT_KEPT_SECONDS,
    maxKept: options.maxKept ?? DEFAULT_MAX_KEPT,
    maxKeptBytes: options.maxKeptBytes ?? DEFAULT_MAX_KEPT_BYTES,
    disconnectGraceSeconds: options.disconnectGraceSeconds ?? 0,
  };
}
