import { requireIntegerAtLeast } from "@remote-task/internal";
import {
  assertSandboxIdPrefix,
  DEFAULT_CWD,
  DEFAULT_ID_PREFIX,
  DEFAULT_TIMEOUT_SECONDS,
} from "@remote-task/protocol";
import type { Dispatcher } from "undici";
import type { BridgeTarget } from "./bridges.js";
import { ConfigurationError } from "./errors.js";
import { unsupportedNodeReason } from "./node-version.js";
import type { BridgeOptions, ClientOptions, RetryInfo, RetryOptions } from "./types.js";

/** Bounds of the default grace period, which follows the client's default task timeout. */
const MIN_DEFAULT_GRACE_SECONDS = 10;
const MAX_DEFAULT_GRACE_SECONDS = 30;
const DEFAULT_IDLE_TIMEOUT_SECONDS = 45;
const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
/**
 * Bytes of the end of each output a result keeps when the call names no `maxOutputBytes`: as much
 * as a remote-task bridge keeps by default.
 */
export const DEFAULT_KEPT_OUTPUT_BYTES = 1024 * 1024;
/**
 * Largest exec result read whole (then parsed at once); a larger one is read as it arrives. Held
 * whole, an answer costs several times its size in memory (the bytes, the text, the parsed
 * strings): 4 MiB keeps a call under 64 MiB of growth whatever the bridge sends.
 */
export const WHOLE_RESULT_BYTES = 4 * 1024 * 1024;
const DEFAULT_MAX_CONNECTIONS = 128;
/** Where a fan-out's window starts when the bridges report no capacity. */
export const DEFAULT_CONCURRENCY = 8;
/** The ceiling of a fan-out's window when the caller sets no `concurrency`. */
export const MAX_DEFAULT_FAN_OUT = 64;

export interface RetryPolicy {
  maxAttempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
  maxTotalMs: number;
  /** A call refused for capacity waits for room until its deadline, outside the budget above. */
  patient: boolean;
  onRetry: ((info: RetryInfo) => void) | undefined;
}

/** Options after validation and defaults. */
export interface ResolvedConfig {
  /** The bridges, in the order calls try them (one for `url`). */
  bridges: BridgeTarget[];
  cwd: string;
  idPrefix: string;
  timeoutSeconds: number;
  /** The grace period of a call with the client's default timeout (health and cancel use it). */
  graceSeconds: number;
  /** The caller's `graceSeconds`, when set; otherwise each call's grace follows its own timeout. */
  graceOption: number | undefined;
  idleTimeoutSeconds: number;
  retry: RetryPolicy;
  dispatcher: Dispatcher | undefined;
  fetch: typeof globalThis.fetch | undefined;
  maxResponseBytes: number;
  maxConnections: number;
}

/** A policy of one attempt: nothing is retried. */
export const NO_RETRY: RetryPolicy = {
  maxAttempts: 1,
  initialDelayMs: 0,
  maxDelayMs: 0,
  maxTotalMs: 0,
  patient: false,
  onRetry: undefined,
};

function positiveNumber(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new ConfigurationError(`${name} must be a finite number greater than 0.`);
  }
  return value;
}

function nonNegativeNumber(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new ConfigurationError(`${name} must be a finite number of at least 0.`);
  }
  return value;
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  return requireIntegerAtLeast(name, value, 1, (message) => new ConfigurationError(message));
}

/**
 * Parses a bridge base URL. `source` names where it came from (an option or an environment
 * variable); the value itself never appears in the message, it may carry a secret.
 */
function parseBridgeUrl(value: string | URL, source: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigurationError(
      `${source} is not a valid URL. Set it to the bridge's base URL, e.g. https://bridge.example.workers.dev.`,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new ConfigurationError(
      `${source} must be an http:// or https:// URL (it uses ${url.protocol.replace(":", "")}).`,
    );
  }
  if (url.username || url.password) {
    throw new ConfigurationError(
      `${source} must not contain credentials; pass the bridge token as the token instead.`,
    );
  }
  if (url.search || url.hash) {
    throw new ConfigurationError(`${source} must not have a query string or fragment.`);
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

function resolveRetry(retry: ClientOptions["retry"]): RetryPolicy {
  if (retry === false) return NO_RETRY;
  const options = retry ?? {};
  if (typeof options !== "object" || options === null) {
    throw new ConfigurationError("retry must be an object of retry options, or false.");
  }
  assertKnownKeys(options, RETRY_OPTIONS, "retry");
  if (options.patient !== undefined && typeof options.patient !== "boolean") {
    throw new ConfigurationError("retry.patient must be true or false.");
  }
  const initialDelayMs = nonNegativeNumber("retry.initialDelayMs", options.initialDelayMs, 250);
  const policy: RetryPolicy = {
    maxAttempts: positiveInteger("retry.maxAttempts", options.maxAttempts, 4),
    initialDelayMs,
    maxDelayMs: nonNegativeNumber("retry.maxDelayMs", options.maxDelayMs, 10_000),
    maxTotalMs: nonNegativeNumber("retry.maxTotalMs", options.maxTotalMs, 30_000),
    patient: options.patient ?? true,
    onRetry: options.onRetry,
  };
  if (policy.onRetry !== undefined && typeof policy.onRetry !== "function") {
    throw new ConfigurationError("retry.onRetry must be a function.");
  }
  return policy;
}

/**
 * Grace period when none is set: as long as the task timeout itself, at least 10 s (a cold
 * start and the transfer) and at most 30 s, so a 2 s task is abandoned after 12 s, not 32 s.
 */
export function defaultGraceSeconds(timeoutSeconds: number): number {
  return Math.min(MAX_DEFAULT_GRACE_SECONDS, Math.max(MIN_DEFAULT_GRACE_SECONDS, timeoutSeconds));
}

/** The grace period of a call whose timeout is `timeoutSeconds`: the caller's, or the default. */
export function graceSecondsFor(config: ResolvedConfig, timeoutSeconds: number): number {
  return config.graceOption ?? defaultGraceSeconds(timeoutSeconds);
}

/** The option names `createClient` takes; any other is refused (a misspelt option does nothing). */
const CLIENT_OPTIONS: ReadonlySet<string> = new Set([
  "url",
  "token",
  "tokenSource",
  "bridges",
  "cwd",
  "idPrefix",
  "timeoutSeconds",
  "graceSeconds",
  "idleTimeoutSeconds",
  "maxConnections",
  "retry",
  "dispatcher",
  "fetch",
  "maxResponseBytes",
] satisfies ReadonlyArray<keyof ClientOptions>);
const RETRY_OPTIONS: ReadonlySet<string> = new Set([
  "maxAttempts",
  "initialDelayMs",
  "maxDelayMs",
  "maxTotalMs",
  "patient",
  "onRetry",
] satisfies ReadonlyArray<keyof RetryOptions>);
const BRIDGE_OPTIONS: ReadonlySet<string> = new Set([
  "url",
  "token",
  "tokenSource",
] satisfies ReadonlyArray<keyof BridgeOptions>);

/**
 * Throws a `ConfigurationError` naming the first key of `value` that is not in `known` (`where`
 * names the object, e.g. "createClient"). TypeScript catches these at compile time; this catches
 * them from JavaScript and from objects built at run time.
 */
export function assertKnownKeys(
  value: object,
  known: ReadonlySet<string>,
  where: string,
  makeError: (message: string) => Error = (message) => new ConfigurationError(message),
): void {
  for (const key of Object.keys(value)) {
    if (known.has(key)) continue;
    throw makeError(
      `${where} has no option \`${key}\` (it would be ignored). The options are: ${[...known].join(", ")}.`,
    );
  }
}

/** One bridge's URL and token, checked; `where` names it in messages (`url`, `bridges[1]`). */
function resolveBridge(options: BridgeOptions, where: string): BridgeTarget {
  if (options.url === undefined || options.url === "") {
    throw new ConfigurationError(
      `${where === "url" ? "url" : `${where}.url`} is required: the bridge's base URL.`,
    );
  }
  const baseUrl = parseBridgeUrl(options.url, where === "url" ? "url" : `${where}.url`);
  const token = options.token === "" ? undefined : options.token;
  if (token !== undefined && (typeof token !== "string" || /[\s]/.test(token))) {
    throw new ConfigurationError(
      `${where === "url" ? "token" : `${where}.token`} must be a string without whitespace or line breaks.`,
    );
  }
  if (options.tokenSource !== undefined && typeof options.tokenSource !== "string") {
    throw new ConfigurationError('tokenSource must be a string, e.g. "--token".');
  }
  return {
    baseUrl,
    token,
    tokenSource: options.tokenSource ?? (where === "url" ? TOKEN_OPTION : `the token of ${where}`),
  };
}

/** The bridges of `options`: `url` and `token` for one, or `bridges` for several. */
function resolveBridges(options: ClientOptions): BridgeTarget[] {
  if (options.bridges === undefined) return [resolveBridge(options as BridgeOptions, "url")];
  if (options.url !== undefined || options.token !== undefined) {
    throw new ConfigurationError(
      "Pass either url (and token) for one bridge or bridges for several, not both.",
    );
  }
  if (!Array.isArray(options.bridges) || options.bridges.length === 0) {
    throw new ConfigurationError("bridges must be a non-empty array of {url, token}.");
  }
  return options.bridges.map((bridge, index) => {
    const where = `bridges[${index}]`;
    if (typeof bridge !== "object" || bridge === null) {
      throw new ConfigurationError(`${where} must be an object {url, token}.`);
    }
    assertKnownKeys(bridge, BRIDGE_OPTIONS, where);
    return resolveBridge(bridge, where);
  });
}

/** `createClient`'s options checked and completed with defaults; throws a `ConfigurationError`. */
export function resolveConfig(options: ClientOptions): ResolvedConfig {
  if (typeof options !== "object" || options === null) {
    throw new ConfigurationError("createClient needs an options object with at least `url`.");
  }
  assertKnownKeys(options, CLIENT_OPTIONS, "createClient");
  const bridges = resolveBridges(options);
  const cwd = options.cwd ?? DEFAULT_CWD;
  if (typeof cwd !== "string" || !cwd.startsWith("/")) {
    throw new ConfigurationError(
      "cwd must be an absolute path inside the sandbox, e.g. /workspace.",
    );
  }
  let idPrefix = options.idPrefix ?? DEFAULT_ID_PREFIX;
  try {
    idPrefix = assertSandboxIdPrefix(idPrefix);
  } catch (error) {
    throw new ConfigurationError(`idPrefix is invalid: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (options.dispatcher !== undefined && options.fetch !== undefined) {
    throw new ConfigurationError("Pass either dispatcher (undici) or fetch, not both.");
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new ConfigurationError("fetch must be a Fetch API function.");
  }
  const unsupported = options.fetch === undefined ? unsupportedNodeReason() : undefined;
  if (unsupported !== undefined) throw new ConfigurationError(unsupported);
  const timeoutSeconds = positiveNumber(
    "timeoutSeconds",
    options.timeoutSeconds,
    DEFAULT_TIMEOUT_SECONDS,
  );
  const graceOption =
    options.graceSeconds === undefined
      ? undefined
      : nonNegativeNumber("graceSeconds", options.graceSeconds, 0);
  return {
    bridges,
    cwd,
    idPrefix,
    timeoutSeconds,
    graceSeconds: graceOption ?? defaultGraceSeconds(timeoutSeconds),
    graceOption,
    idleTimeoutSeconds: positiveNumber(
      "idleTimeoutSeconds",
      options.idleTimeoutSeconds,
      DEFAULT_IDLE_TIMEOUT_SECONDS,
    ),
    retry: resolveRetry(options.retry),
    // The public type describes a dispatcher by its shape only; undici's own type is the real one.
    dispatcher: options.dispatcher as Dispatcher | undefined,
    fetch: options.fetch,
    maxResponseBytes: positiveInteger(
      "maxResponseBytes",
      options.maxResponseBytes,
      DEFAULT_MAX_RESPONSE_BYTES,
    ),
    maxConnections: positiveInteger(
      "maxConnections",
      options.maxConnections,
      DEFAULT_MAX_CONNECTIONS,
    ),
  };
}

/** How an authentication error names a token given as the `token` option. */
const TOKEN_OPTION = "the `token` option";

/** Environment variables the client reads; each is also accepted with a `MIKAN_` prefix. */
const ENV_URL = "CLOUDFLARE_SANDBOX_URL";
const ENV_TOKEN = "CLOUDFLARE_SANDBOX_TOKEN";
const ENV_CWD = "CLOUDFLARE_SANDBOX_CWD";

export type Env = Readonly<Record<string, string | undefined>>;

/** The process's environment, or an empty one on a runtime without `process`. */
export function processEnv(): Env {
  return (globalThis as { process?: { env?: Env } }).process?.env ?? {};
}

/** The trimmed value of `name` (unprefixed wins over `MIKAN_name`) and which variable held it. */
function readEnv(env: Env, name: string): { value: string; variable: string } | undefined {
  for (const variable of [name, `MIKAN_${name}`]) {
    const value = env[variable]?.trim();
    if (value) return { value, variable };
  }
  return undefined;
}

/** Client options from the environment; throws a `ConfigurationError` naming the variable. */
export function optionsFromEnv(env: Env, overrides: Partial<ClientOptions> = {}): ClientOptions {
  const url = readEnv(env, ENV_URL);
  const token = readEnv(env, ENV_TOKEN);
  const cwd = readEnv(env, ENV_CWD);
  if (overrides.bridges !== undefined) return { ...overrides };
  let resolvedUrl: string | URL;
  if (overrides.url !== undefined) resolvedUrl = overrides.url;
  else if (url === undefined) {
    throw new ConfigurationError(
      `${ENV_URL} is not set. Set it (or MIKAN_${ENV_URL}) to the bridge's base URL.`,
    );
  } else resolvedUrl = parseBridgeUrl(url.value, url.variable);
  if (cwd !== undefined && overrides.cwd === undefined && !cwd.value.startsWith("/")) {
    throw new ConfigurationError(`${cwd.variable} must be an absolute path, e.g. /workspace.`);
  }
  if (token !== undefined && overrides.token === undefined && /\s/.test(token.value)) {
    throw new ConfigurationError(`${token.variable} must not contain whitespace or line breaks.`);
  }
  const fromEnv = overrides.token === undefined;
  return {
    ...overrides,
    url: resolvedUrl,
    token: fromEnv ? token?.value : overrides.token,
    // An authentication error names the variable the token came from, or the one to set.
    tokenSource: fromEnv ? (token?.variable ?? ENV_TOKEN) : overrides.tokenSource,
    cwd: overrides.cwd ?? cwd?.value,
  };
}

/** True when the environment names a valid bridge URL, so a client (or tool) can be offered. */
export function isConfigured(env: Env = processEnv()): boolean {
  const url = readEnv(env, ENV_URL);
  if (url === undefined) return false;
  try {
    parseBridgeUrl(url.value, url.variable);
    return true;
  } catch {
    return false;
  }
}
