import { type AdmissionSettings, DEFAULT_LIMITS } from "@remote-task/bridge";
import { hasBrand } from "@remote-task/internal";
import { type Limits, limitsSchema, MAX_HEARTBEAT_INTERVAL_MS } from "@remote-task/protocol";
import type { CloudflareSandboxBackendOptions } from "./cloudflare-backend.js";

/** The Worker's bindings (wrangler.jsonc `vars`, the `BRIDGE_TOKEN` secret, the DO namespace). */
export interface WorkerEnv {
  Sandbox: CloudflareSandboxBackendOptions["namespace"];
  /** Secret: `npx wrangler secret put BRIDGE_TOKEN`. Without it exec is refused. */
  BRIDGE_TOKEN?: string;
  /** `"true"` serves without a token (explicit opt-out); `"false"` or unset keeps auth on. */
  ALLOW_UNAUTHENTICATED?: string;
  DEFAULT_CWD?: string;
  HEARTBEAT_INTERVAL_MS?: string;
  /** How long an idle sandbox lives if a destroy ever fails: `"30s"`, `"5m"`, `"1h"` or seconds. */
  SANDBOX_SLEEP_AFTER?: string;
  MAX_REQUEST_BYTES?: string;
  MAX_COMMAND_BYTES?: string;
  MAX_ENV_ENTRIES?: string;
  MAX_ENV_ENTRY_BYTES?: string;
  MAX_TIMEOUT_SECONDS?: string;
  MAX_OUTPUT_BYTES?: string;
  /** Most calls one isolate runs at once (default: see {@link workerAdmission}). */
  MAX_CONCURRENT_CALLS?: string;
  /** Most calls waiting in one isolate for a slot (default: as many as may run). */
  MAX_QUEUED_CALLS?: string;
}

/** Each limit's Worker variable; the protocol's `limitsSchema` checks the values. */
export const LIMIT_VARIABLES = {
  MAX_REQUEST_BYTES: "maxRequestBytes",
  MAX_COMMAND_BYTES: "maxCommandBytes",
  MAX_ENV_ENTRIES: "maxEnvEntries",
  MAX_ENV_ENTRY_BYTES: "maxEnvEntryBytes",
  MAX_TIMEOUT_SECONDS: "maxTimeoutSeconds",
  MAX_OUTPUT_BYTES: "maxOutputBytes",
} as const satisfies Record<string, keyof Limits>;

/**
 * Most output bytes retained per stream on Workers. A Worker has 128 MB of memory; two streams
 * at this cap plus the response copy stay far below it.
 */
export const WORKER_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

/** Largest request body accepted on Workers (the platform itself caps bodies at 100 MB). */
export const WORKER_MAX_REQUEST_BYTES = 16 * 1024 * 1024;

/** Memory of one isolate (128 MB in all) that the default admission gives to retained output. */
export const WORKER_CALL_MEMORY_BYTES = 64 * 1024 * 1024;

/**
 * The Worker's default admission, per isolate. Containers are capped across the deployment by
 * `max_instances` (beyond it a call gets 503 `capacity_exceeded` from the backend); what one
 * isolate must guard is its own memory: as many calls as {@link WORKER_CALL_MEMORY_BYTES} holds
 * at two full tails each (32 at the default 1 MiB per stream, 2 at 16 MiB), and as many waiting.
 */
export function workerAdmission(maxOutputBytes: number): AdmissionSettings {
  const maxConcurrent = Math.max(1, Math.floor(WORKER_CALL_MEMORY_BYTES / (2 * maxOutputBytes)));
  return { maxConcurrent, maxQueued: maxConcurrent };
}

export interface WorkerConfig {
  token: string | undefined;
  allowUnauthenticated: boolean;
  limits: Partial<Limits>;
  admission: AdmissionSettings;
  defaultCwd?: string;
  heartbeatIntervalMs?: number;
  sleepAfter?: string | number;
}

const CONFIG_ERROR_BRAND = Symbol.for("remote-task.worker.ConfigError");

/** A Worker variable with a value the Worker cannot use. */
export class ConfigError extends Error {
  static readonly brand = CONFIG_ERROR_BRAND;
  readonly [CONFIG_ERROR_BRAND] = true;
  override readonly name = "ConfigError";

  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(
      `Worker variable ${variable} ${problem}. Fix it in wrangler.jsonc "vars" (or the ` +
        "Cloudflare dashboard) and deploy again.",
    );
  }

  static isInstance(value: unknown): value is ConfigError {
    return hasBrand(value, CONFIG_ERROR_BRAND);
  }
}

/** Reads and checks the Worker's configuration; throws a {@link ConfigError} naming the variable. */
export function readConfig(env: WorkerEnv): WorkerConfig {
  const limits = readLimits(env);
  const config: WorkerConfig = {
    token: env.BRIDGE_TOKEN === "" ? undefined : env.BRIDGE_TOKEN,
    allowUnauthenticated: readAllowUnauthenticated(env.ALLOW_UNAUTHENTICATED),
    limits,
    admission: readAdmission(env, limits.maxOutputBytes ?? DEFAULT_LIMITS.maxOutputBytes),
  };
  const cwd = present(env.DEFAULT_CWD);
  if (cwd !== undefined) {
    if (!cwd.startsWith("/")) throw new ConfigError("DEFAULT_CWD", "must be an absolute path");
    config.defaultCwd = cwd;
  }
  const heartbeat = present(env.HEARTBEAT_INTERVAL_MS);
  if (heartbeat !== undefined) {
    const ms = Number(heartbeat);
    if (!Number.isInteger(ms) || ms < 1 || ms > MAX_HEARTBEAT_INTERVAL_MS) {
      throw new ConfigError(
        "HEARTBEAT_INTERVAL_MS",
        `must be a whole number of milliseconds from 1 to ${MAX_HEARTBEAT_INTERVAL_MS}`,
      );
    }
    config.heartbeatIntervalMs = ms;
  }
  const sleepAfter = present(env.SANDBOX_SLEEP_AFTER);
  if (sleepAfter !== undefined) config.sleepAfter = readDuration(sleepAfter);
  return config;
}

function present(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === "" ? undefined : trimmed;
}

function readAllowUnauthenticated(value: string | undefined): boolean {
  const text = present(value)?.toLowerCase();
  if (text === undefined || text === "false") return false;
  if (text === "true") return true;
  throw new ConfigError("ALLOW_UNAUTHENTICATED", 'must be "true" or "false"');
}

function readLimits(env: WorkerEnv): Partial<Limits> {
  const limits: Partial<Limits> = {};
  for (const [variable, key] of Object.entries(LIMIT_VARIABLES) as Array<
    [keyof typeof LIMIT_VARIABLES, keyof Limits]
  >) {
    const text = present(env[variable]);
    if (text === undefined) continue;
    const parsed = limitsSchema.shape[key].safeParse(Number(text));
    if (!parsed.success) {
      const message = parsed.error.issues[0]?.message ?? "invalid value";
      throw new ConfigError(variable, `is not a valid limit (${message})`);
    }
    limits[key] = parsed.data;
  }
  if ((limits.maxOutputBytes ?? 0) > WORKER_MAX_OUTPUT_BYTES) {
    throw new ConfigError(
      "MAX_OUTPUT_BYTES",
      `must be at most ${WORKER_MAX_OUTPUT_BYTES} on Workers (128 MB of memory per Worker)`,
    );
  }
  if ((limits.maxRequestBytes ?? 0) > WORKER_MAX_REQUEST_BYTES) {
    throw new ConfigError("MAX_REQUEST_BYTES", `must be at most ${WORKER_MAX_REQUEST_BYTES}`);
  }
  return limits;
}

function readAdmission(env: WorkerEnv, maxOutputBytes: number): AdmissionSettings {
  const defaults = workerAdmission(maxOutputBytes);
  const maxConcurrent = readCount(env, "MAX_CONCURRENT_CALLS", 1) ?? defaults.maxConcurrent;
  const maxQueued = readCount(env, "MAX_QUEUED_CALLS", 0) ?? maxConcurrent;
  return { maxConcurrent, maxQueued };
}

function readCount(
  env: WorkerEnv,
  variable: "MAX_CONCURRENT_CALLS" | "MAX_QUEUED_CALLS",
  least: number,
): number | undefined {
  const text = present(env[variable]);
  if (text === undefined) return undefined;
  const count = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(count) || count < least) {
    throw new ConfigError(variable, `must be a whole number of at least ${least}`);
  }
  return count;
}

/** `"30s"`, `"5m"`, `"1h"` as the SDK accepts them, or a plain number of seconds. */
function readDuration(text: string): string | number {
  if (/^[1-9]\d*$/.test(text)) return Number(text);
  if (/^[1-9]\d*[smh]$/.test(text)) return text;
  throw new ConfigError(
    "SANDBOX_SLEEP_AFTER",
    'must be a duration such as "30s", "5m" or "1h", or a number of seconds',
  );
}
