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

export interface WorkerConfig {
  token: string | undefined;
  allowUnauthenticated: boolean;
  limits: Partial<Limits>;
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
  const config: WorkerConfig = {
    token: env.BRIDGE_TOKEN === "" ? undefined : env.BRIDGE_TOKEN,
    allowUnauthenticated: readAllowUnauthenticated(env.ALLOW_UNAUTHENTICATED),
    limits: readLimits(env),
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

/** `"30s"`, `"5m"`, `"1h"` as the SDK accepts them, or a plain number of seconds. */
function readDuration(text: string): string | number {
  if (/^[1-9]\d*$/.test(text)) return Number(text);
  if (/^[1-9]\d*[smh]$/.test(text)) return text;
  throw new ConfigError(
    "SANDBOX_SLEEP_AFTER",
    'must be a duration such as "30s", "5m" or "1h", or a number of seconds',
  );
}
