import {
  type AdmissionSettings,
  DEFAULT_LIMITS,
  networkAllows,
  resolveSecrets,
  type SecretDeclaration,
  type SecretReader,
  type SecretsOptions,
} from "@remote-task/bridge";
import { brandClass } from "@remote-task/internal";
import {
  DEFAULT_NETWORK_POLICY,
  type Limits,
  limitsSchema,
  MAX_HEARTBEAT_INTERVAL_MS,
  type NetworkPolicy,
  networkPolicySchema,
} from "@remote-task/protocol";
import { CONTAINER_NETWORK_MODES, type ContainerNamespace } from "./container-client.js";
import type { HedgeSetting } from "./hedge.js";
import type { WarmPoolShardRpc } from "./warm-pool-rpc.js";

/** The Worker's bindings (wrangler.jsonc `vars`, the `BRIDGE_TOKEN` secret, the DO namespace). */
export interface WorkerEnv {
  TaskContainer: ContainerNamespace;
  /** Secret: `npx wrangler secret put BRIDGE_TOKEN`. Without it exec is refused. */
  BRIDGE_TOKEN?: string;
  /** `"true"` serves without a token (explicit opt-out); `"false"` or unset keeps auth on. */
  ALLOW_UNAUTHENTICATED?: string;
  DEFAULT_CWD?: string;
  HEARTBEAT_INTERVAL_MS?: string;
  /**
   * How long after its call's deadline a container's own Durable Object destroys it, should every
   * destroy fail: `"30s"`, `"5m"`, `"1h"` or seconds.
   */
  SANDBOX_SLEEP_AFTER?: string;
  MAX_REQUEST_BYTES?: string;
  MAX_COMMAND_BYTES?: string;
  MAX_ENV_ENTRIES?: string;
  MAX_ENV_ENTRY_BYTES?: string;
  MAX_TIMEOUT_SECONDS?: string;
  MAX_OUTPUT_BYTES?: string;
  MAX_STDIN_BYTES?: string;
  /**
   * Network policy of a call that names none: `none` (the default), `open`, or an allowlist of
   * host patterns separated by commas (README: "Network").
   */
  NETWORK_DEFAULT?: string;
  /** The most a call may ask for: `none`, `open` or an allowlist (default: NETWORK_DEFAULT). */
  NETWORK_CEILING?: string;
  /** Containers the warm pool keeps started and waiting; `0` (the default) turns the pool off. */
  WARM_POOL_TARGET?: string;
  /** Longest an idle warm container waits before it is replaced: `"10m"` by default. */
  WARM_POOL_MAX_IDLE?: string;
  /** Containers each pool shard starts at once when refilling (default 4). */
  WARM_POOL_REFILL_BATCH?: string;
  /**
   * When a slow cold start gets a second container started for it (README: "Hedged starts"):
   * `auto` (the default: a delay taken from the starts the isolate has seen), `off`, or a
   * whole number of milliseconds.
   */
  HEDGE_START_AFTER_MS?: string;
  /** `containers[].max_instances` of wrangler.jsonc, repeated here: the pool's ceiling. */
  MAX_INSTANCES?: string;
  /** The warm pool's Durable Object namespace (`WarmPool`). */
  WarmPool?: DurableObjectNamespace<WarmPoolShardRpc>;
  /** The Worker's version (wrangler.jsonc `version_metadata`): a deploy drains older warm containers. */
  CF_VERSION_METADATA?: WorkerVersionMetadata;
  /** Most calls one isolate runs at once (default: see {@link workerAdmission}). */
  MAX_CONCURRENT_CALLS?: string;
  /** Most calls waiting in one isolate for a slot (default: as many as may run). */
  MAX_QUEUED_CALLS?: string;
  /**
   * `"true"` turns durable calls on (README: "Durable calls"): each call is owned by its own
   * `CallKeeper` Durable Object; `"false"` or unset keeps them off.
   */
  DURABLE_CALLS?: string;
  /** Seconds a durable call's outcome is kept after it ends (default 600). */
  KEPT_SECONDS?: string;
  /** Seconds a call without `detach` runs on once its caller left (default 10). */
  DISCONNECT_GRACE_SECONDS?: string;
  /** The durable calls' keepers, one per sandbox id (`CallKeeper`). */
  CallKeeper?: DurableObjectNamespace<CallKeeperRpc>;
  /**
   * The secrets a call may ask for by name (README: "Secrets"), as JSON text or a JSON var:
   * `{"GH_TOKEN": {"hosts": ["api.github.com"], "header": "Authorization: Bearer {value}"}}`.
   * Each value is the Worker secret of the same name (`wrangler secret put GH_TOKEN`), or the
   * binding `"from": {"env": "OTHER"}` names.
   */
  SECRETS?: string | Record<string, unknown>;
}

/** What the Worker asks of a durable call's `CallKeeper` (call-keeper.ts). */
export interface CallKeeperRpc extends Rpc.DurableObjectBranded {
  /** Answers one request about the keeper's call, configured by the Worker's variables. */
  serve(request: Request, sandboxId: string, vars: { [name: string]: string }): Promise<Response>;
}

/** Each limit's Worker variable; the protocol's `limitsSchema` checks the values. */
const LIMIT_VARIABLES = {
  MAX_REQUEST_BYTES: "maxRequestBytes",
  MAX_COMMAND_BYTES: "maxCommandBytes",
  MAX_ENV_ENTRIES: "maxEnvEntries",
  MAX_ENV_ENTRY_BYTES: "maxEnvEntryBytes",
  MAX_TIMEOUT_SECONDS: "maxTimeoutSeconds",
  MAX_OUTPUT_BYTES: "maxOutputBytes",
  MAX_STDIN_BYTES: "maxStdinBytes",
} as const satisfies Record<string, keyof Limits>;

/**
 * Most output bytes retained per stream on Workers. A Worker has 128 MB of memory; two streams
 * at this cap plus the response copy stay far below it.
 */
const WORKER_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

/** Largest request body accepted on Workers (the platform itself caps bodies at 100 MB). */
const WORKER_MAX_REQUEST_BYTES = 16 * 1024 * 1024;

/** Containers one pool shard holds at most: a pool of N containers has ceil(N / 8) shards. */
const WARM_POOL_SHARD_SIZE = 8;
const DEFAULT_WARM_POOL_MAX_IDLE_SECONDS = 600;
const DEFAULT_WARM_POOL_REFILL_BATCH = 4;
const MAX_WARM_POOL_TARGET = 1000;
const MAX_WARM_POOL_REFILL_BATCH = 32;
const MIN_WARM_POOL_MAX_IDLE_SECONDS = 60;
const MAX_WARM_POOL_MAX_IDLE_SECONDS = 24 * 3600;

/** The warm pool's settings; `target` 0 means no pool. */
export interface WarmPoolConfig {
  /** Containers kept started and waiting, across all shards. */
  target: number;
  /** An idle warm container older than this is destroyed and replaced. */
  maxIdleSeconds: number;
  /** Containers one shard starts at once. */
  refillBatch: number;
  /** Shards the pool is spread over: ceil(target / {@link WARM_POOL_SHARD_SIZE}). */
  shards: number;
  /**
   * Most containers the pool holds (spare ones, ones started for waiting calls, ones being
   * destroyed): half of `MAX_INSTANCES` (the target when that is unset).
   */
  ceiling: number;
}

/** Memory of one isolate (128 MB in all) that the default admission gives to retained output. */
const WORKER_CALL_MEMORY_BYTES = 64 * 1024 * 1024;

/** Memory of one isolate that the calls waiting for a slot may hold (their requests). */
const WORKER_QUEUE_MEMORY_BYTES = 16 * 1024 * 1024;

/**
 * The Worker's default admission, per isolate. Containers are capped across the deployment by
 * `max_instances` (beyond it a call gets 503 `capacity_exceeded` from the backend); what one
 * isolate must guard is its own memory: as many calls as {@link WORKER_CALL_MEMORY_BYTES} holds
 * at two full tails each (32 at the default 1 MiB per stream, 2 at 16 MiB), and as many waiting,
 * whose requests hold at most {@link WORKER_QUEUE_MEMORY_BYTES}.
 */
function workerAdmission(maxOutputBytes: number): AdmissionSettings {
  const maxConcurrent = Math.max(1, Math.floor(WORKER_CALL_MEMORY_BYTES / (2 * maxOutputBytes)));
  return { maxConcurrent, maxQueued: maxConcurrent, maxQueuedBytes: WORKER_QUEUE_MEMORY_BYTES };
}

export interface WorkerConfig {
  token: string | undefined;
  allowUnauthenticated: boolean;
  limits: Partial<Limits>;
  admission: AdmissionSettings;
  defaultCwd?: string;
  heartbeatIntervalMs?: number;
  /** How long after its deadline a container's own object destroys it (SANDBOX_SLEEP_AFTER). */
  backstopMs?: number;
  warmPool: WarmPoolConfig;
  network: NetworkConfig;
  hedge: HedgeSetting;
  /** The Worker's version ({@link versionOf}). */
  version: string;
  /** Durable calls (DURABLE_CALLS), undefined when off. */
  durable?: DurableConfig;
  /** The deployer's secrets (SECRETS), undefined when none are declared. */
  secrets?: SecretsOptions;
}

/** What the Worker keeps of a durable call (one call per `CallKeeper`). */
interface DurableConfig {
  /** Seconds an outcome is kept after its call ended (KEPT_SECONDS). */
  keptSeconds: number;
  /** Seconds a call without `detach` runs on once its caller left (DISCONNECT_GRACE_SECONDS). */
  disconnectGraceSeconds: number;
}

/** Default seconds an outcome is kept. */
const DEFAULT_KEPT_SECONDS = 600;
/** Longest an outcome may be kept (a day). */
const MAX_KEPT_SECONDS = 86_400;
/** Default grace of a call whose caller left. */
const DEFAULT_DISCONNECT_GRACE_SECONDS = 10;
/** Longest grace of a call whose caller left. */
const MAX_DISCONNECT_GRACE_SECONDS = 300;

/** The policy of a call that names none, and the most a call may ask for. */
interface NetworkConfig {
  default: NetworkPolicy;
  ceiling: NetworkPolicy;
}

/** A Worker variable with a value the Worker cannot use. */
export class ConfigError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.worker.ConfigError");
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
}

const configs = new WeakMap<WorkerEnv, WorkerConfig | ConfigError>();

/**
 * The Worker's configuration from its bindings, read and checked once per bindings object (an
 * isolate's, or a Durable Object's `env`) and kept: the answer, or the {@link ConfigError}
 * naming the variable that is wrong.
 */
export function workerConfig(env: WorkerEnv): WorkerConfig | ConfigError {
  let config = configs.get(env);
  if (config === undefined) {
    try {
      config = readConfig(env);
    } catch (error) {
      if (!ConfigError.isInstance(error)) throw error;
      config = error;
    }
    configs.set(env, config);
  }
  return config;
}

/** The Worker version a warm container belongs to; a deploy drains the containers of older ones. */
export function versionOf(env: Pick<WorkerEnv, "CF_VERSION_METADATA">): string {
  return env.CF_VERSION_METADATA?.id ?? "unversioned";
}

/** Reads and checks the Worker's configuration; throws a {@link ConfigError} naming the variable. */
export function readConfig(env: WorkerEnv): WorkerConfig {
  const limits = readLimits(env);
  const config: WorkerConfig = {
    token: env.BRIDGE_TOKEN === "" ? undefined : env.BRIDGE_TOKEN,
    allowUnauthenticated: readAllowUnauthenticated(env.ALLOW_UNAUTHENTICATED),
    limits,
    warmPool: readWarmPool(env),
    network: readNetwork(env),
    admission: readAdmission(env, limits.maxOutputBytes ?? DEFAULT_LIMITS.maxOutputBytes),
    hedge: readHedge(env.HEDGE_START_AFTER_MS),
    version: versionOf(env),
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
  const durable = readDurable(env);
  if (durable !== undefined) config.durable = durable;
  const secrets = readSecrets(env.SECRETS);
  if (secrets !== undefined) config.secrets = secrets;
  const sleepAfter = present(env.SANDBOX_SLEEP_AFTER);
  if (sleepAfter !== undefined) {
    config.backstopMs = durationSeconds(readDuration("SANDBOX_SLEEP_AFTER", sleepAfter)) * 1000;
  }
  return config;
}

function readWarmPool(env: WorkerEnv): WarmPoolConfig {
  const target = readWhole("WARM_POOL_TARGET", env.WARM_POOL_TARGET, 0, MAX_WARM_POOL_TARGET) ?? 0;
  const refillBatch =
    readWhole(
      "WARM_POOL_REFILL_BATCH",
      env.WARM_POOL_REFILL_BATCH,
      1,
      MAX_WARM_POOL_REFILL_BATCH,
    ) ?? DEFAULT_WARM_POOL_REFILL_BATCH;
  const idle = present(env.WARM_POOL_MAX_IDLE);
  const maxIdleSeconds =
    idle === undefined
      ? DEFAULT_WARM_POOL_MAX_IDLE_SECONDS
      : durationSeconds(readDuration("WARM_POOL_MAX_IDLE", idle));
  if (maxIdleSeconds < MIN_WARM_POOL_MAX_IDLE_SECONDS) {
    throw new ConfigError(
      "WARM_POOL_MAX_IDLE",
      `must be at least ${MIN_WARM_POOL_MAX_IDLE_SECONDS} seconds`,
    );
  }
  if (maxIdleSeconds > MAX_WARM_POOL_MAX_IDLE_SECONDS) {
    throw new ConfigError("WARM_POOL_MAX_IDLE", "must be at most 24 hours");
  }
  const maxInstances = readWhole("MAX_INSTANCES", env.MAX_INSTANCES, 1, Number.MAX_SAFE_INTEGER);
  if (target > 0) {
    if (maxInstances === undefined) {
      throw new ConfigError(
        "MAX_INSTANCES",
        "must be set to the containers' max_instances (wrangler.jsonc) when WARM_POOL_TARGET is above 0",
      );
    }
    // Every warm container holds an instance; half of them stay free for the calls themselves,
    // so cold starts beyond the pool always find room.
    if (target > Math.floor(maxInstances / 2)) {
      throw new ConfigError(
        "WARM_POOL_TARGET",
        `must be at most half of MAX_INSTANCES (${Math.floor(maxInstances / 2)} of ${maxInstances}), so that calls beyond the pool find instances; raise max_instances and MAX_INSTANCES, or lower the target`,
      );
    }
  }
  if (env.WarmPool === undefined && target > 0) {
    throw new ConfigError(
      "WARM_POOL_TARGET",
      "needs the WarmPool Durable Object binding (see wrangler.jsonc)",
    );
  }
  return {
    target,
    maxIdleSeconds,
    refillBatch,
    shards: Math.ceil(target / WARM_POOL_SHARD_SIZE),
    ceiling: maxInstances === undefined ? target : Math.floor(maxInstances / 2),
  };
}

/** Longest configured hedge delay: beyond it a start has long failed (MAX_START_MS). */
const MAX_HEDGE_AFTER_MS = 120_000;

function readHedge(value: string | undefined): HedgeSetting {
  const text = present(value)?.toLowerCase();
  if (text === undefined || text === "auto") return { after: "observed" };
  if (text === "off") return { after: "off" };
  const ms = Number(text);
  if (!/^\d+$/.test(text) || ms < 1 || ms > MAX_HEDGE_AFTER_MS) {
    throw new ConfigError(
      "HEDGE_START_AFTER_MS",
      `must be "auto", "off" or a whole number of milliseconds from 1 to ${MAX_HEDGE_AFTER_MS}`,
    );
  }
  return { after: ms };
}

function readNetwork(env: WorkerEnv): NetworkConfig {
  const defaultText = present(env.NETWORK_DEFAULT);
  const ceilingText = present(env.NETWORK_CEILING);
  const policy =
    defaultText === undefined
      ? DEFAULT_NETWORK_POLICY
      : readNetworkPolicy("NETWORK_DEFAULT", defaultText);
  const ceiling =
    ceilingText === undefined ? policy : readNetworkPolicy("NETWORK_CEILING", ceilingText);
  if (!networkAllows(ceiling, policy)) {
    throw new ConfigError(
      "NETWORK_DEFAULT",
      `is ${policy}, wider than NETWORK_CEILING (${ceiling}); widen the ceiling or narrow the default`,
    );
  }
  return { default: policy, ceiling };
}

/** `none`, `open`, host patterns separated by commas, or the protocol's JSON form. */
function readNetworkPolicy(variable: string, text: string): NetworkPolicy {
  let value: unknown;
  if (/^["{]/.test(text)) {
    try {
      value = JSON.parse(text);
    } catch {
      throw new ConfigError(variable, "is not valid JSON");
    }
  } else if (/^(none|open)$/i.test(text)) {
    value = text.toLowerCase();
  } else {
    value = { allow: text.split(",").map((pattern) => pattern.trim()) };
  }
  const parsed = networkPolicySchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]?.message ?? "invalid value";
    throw new ConfigError(
      variable,
      `must be "none", "open" or host patterns separated by commas (${issue})`,
    );
  }
  return parsed.data;
}

/** A whole number from `min` to `max`, or `undefined` when unset. */
function readWhole(variable: string, value: string | undefined, min: number, max: number) {
  const text = present(value);
  if (text === undefined) return undefined;
  const number = Number(text);
  if (!/^\d+$/.test(text) || number < min || number > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `${min} or more` : `from ${min} to ${max}`;
    throw new ConfigError(variable, `must be a whole number ${range}`);
  }
  return number;
}

/** Seconds in a duration as {@link readDuration} returns it. */
function durationSeconds(duration: string | number): number {
  if (typeof duration === "number") return duration;
  const unit = { s: 1, m: 60, h: 3600 }[duration.slice(-1) as "s" | "m" | "h"];
  return Number(duration.slice(0, -1)) * unit;
}

function present(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === "" ? undefined : trimmed;
}

function readDurable(env: WorkerEnv): DurableConfig | undefined {
  const text = present(env.DURABLE_CALLS)?.toLowerCase();
  if (text === undefined || text === "false") return undefined;
  if (text !== "true") throw new ConfigError("DURABLE_CALLS", 'must be "true" or "false"');
  if (env.CallKeeper === undefined) {
    throw new ConfigError(
      "DURABLE_CALLS",
      "needs the CallKeeper Durable Object binding (see wrangler.jsonc)",
    );
  }
  return {
    keptSeconds:
      readWhole("KEPT_SECONDS", env.KEPT_SECONDS, 0, MAX_KEPT_SECONDS) ?? DEFAULT_KEPT_SECONDS,
    disconnectGraceSeconds:
      readWhole(
        "DISCONNECT_GRACE_SECONDS",
        env.DISCONNECT_GRACE_SECONDS,
        0,
        MAX_DISCONNECT_GRACE_SECONDS,
      ) ?? DEFAULT_DISCONNECT_GRACE_SECONDS,
  };
}

/**
 * The SECRETS variable: a JSON object of declarations by name (text, or a JSON var of
 * wrangler.jsonc), each value read from the Worker binding of that name unless `from: { env }`
 * names another. Checked as the bridge core checks them (names, host patterns, header), so a
 * mistake is a configuration error, not a failed call.
 */
function readSecrets(value: WorkerEnv["SECRETS"]): SecretsOptions | undefined {
  let parsed: unknown = value;
  if (typeof value === "string") {
    const text = present(value);
    if (text === undefined) return undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ConfigError("SECRETS", "is not valid JSON");
    }
  }
  if (parsed === undefined) return undefined;
  if (!isObject(parsed)) {
    throw new ConfigError(
      "SECRETS",
      'must be a JSON object of secrets by name, e.g. {"GH_TOKEN": {"hosts": ["api.github.com"]}}',
    );
  }
  const secrets: Record<string, SecretDeclaration> = {};
  for (const [name, declaration] of Object.entries(parsed)) {
    if (!isObject(declaration)) {
      throw new ConfigError(
        "SECRETS",
        `has ${name} as ${JSON.stringify(declaration)}, not an object`,
      );
    }
    const from = declaration.from ?? { env: name };
    if (isObject(from) && "file" in from) {
      throw new ConfigError(
        "SECRETS",
        `has ${name}.from.file, but a Worker reads no files: store the value as a Worker secret (\`wrangler secret put ${name}\`) and leave out "from", or name another binding with {"env": "NAME"}`,
      );
    }
    if (!isObject(from) || typeof from.env !== "string" || from.env === "") {
      throw new ConfigError(
        "SECRETS",
        `has ${name}.from as ${JSON.stringify(from)}; it must be {"env": "BINDING"} (or left out: the binding ${name})`,
      );
    }
    secrets[name] = {
      ...(declaration as Omit<SecretDeclaration, "from">),
      from: { env: from.env },
    };
  }
  try {
    resolveSecrets(
      secrets,
      { name: "cloudflare", injectsSecrets: true, networkModes: CONTAINER_NETWORK_MODES },
      true,
    );
  } catch (error) {
    throw new ConfigError("SECRETS", `is wrong: ${(error as Error).message.replace(/\.$/, "")}`);
  }
  return secrets;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads a secret's value from the Worker's bindings (a `wrangler secret put` secret, or a
 * variable): the binding `source.env` when it holds text, else undefined.
 */
export function bindingReader(env: WorkerEnv): SecretReader {
  return async (source) => {
    if (!("env" in source)) return undefined;
    const value = (env as unknown as Record<string, unknown>)[source.env];
    return typeof value === "string" ? value : undefined;
  };
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
    // `maxStdinBytes` is the one optional limit; the schema never yields undefined for a number.
    if (parsed.data !== undefined) limits[key] = parsed.data;
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
  const maxConcurrent =
    readWhole("MAX_CONCURRENT_CALLS", env.MAX_CONCURRENT_CALLS, 1, Number.MAX_SAFE_INTEGER) ??
    defaults.maxConcurrent;
  const maxQueued =
    readWhole("MAX_QUEUED_CALLS", env.MAX_QUEUED_CALLS, 0, Number.MAX_SAFE_INTEGER) ??
    maxConcurrent;
  return { maxConcurrent, maxQueued, maxQueuedBytes: defaults.maxQueuedBytes };
}

/** `"30s"`, `"5m"`, `"1h"`, or a plain number of seconds. */
function readDuration(variable: string, text: string): string | number {
  if (/^[1-9]\d*$/.test(text)) return Number(text);
  if (/^[1-9]\d*[smh]$/.test(text)) return text;
  throw new ConfigError(
    variable,
    'must be a duration such as "30s", "5m" or "1h", or a number of seconds',
  );
}
