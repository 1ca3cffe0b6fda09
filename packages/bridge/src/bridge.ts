import {
  BRIDGE_TEXTS,
  requireIntegerAtLeast,
  WHOLE_WORD_SECRET_LENGTH,
} from "@remote-task/internal";
import {
  DEFAULT_CWD,
  type HealthResponse,
  type Limits,
  MAX_HEARTBEAT_INTERVAL_MS,
  openApiDocument,
  PROTOCOL_VERSION,
} from "@remote-task/protocol";
import { type Context, Hono } from "hono";
import { requireToken } from "./auth.js";
import type { BackendHealth, SandboxBackend } from "./backend.js";
import { logDetail } from "./call.js";
import { CallRegistry } from "./calls.js";
import { type CorsOptions, resolveCors, withCors } from "./cors.js";
import { type ExecRoutesContext, handleCancel, handleExec, wantsEventStream } from "./exec.js";
import { KeptCalls } from "./kept.js";
import {
  type AdmissionOptions,
  DEFAULT_STREAM_BUFFER_BYTES,
  type DurableOptions,
  resolveAdmission,
  resolveDurable,
  resolveLimits,
} from "./limits.js";
import { type BridgeLogger, jsonLineLogger } from "./logger.js";
import { type NetworkOptions, resolveNetwork } from "./network.js";
import { handleCallStatus } from "./reattach.js";
import { errorResponse, HttpError, jsonResponse } from "./responses.js";
import {
  readSecretFromEnv,
  resolveSecrets,
  type SecretReader,
  type SecretsOptions,
  secretsReport,
} from "./secrets.js";
import { BRIDGE_VERSION } from "./version.js";

/**
 * Shortest token the bridge takes without a warning: a shorter one can be guessed, and log
 * redaction replaces it only where it stands as a whole word (see redact.ts in the internal
 * package), since a few letters also occur inside ordinary words.
 */
export const MIN_TOKEN_LENGTH = WHOLE_WORD_SECRET_LENGTH;

function weakToken(length: number): string {
  return `The bridge token is ${length} characters long, too short to be a secret: it can be guessed, and log redaction replaces it only where it stands as a whole word. Use at least ${MIN_TOKEN_LENGTH} random characters (e.g. \`openssl rand -base64 32\`).`;
}

/** Default interval between SSE heartbeats of a quiet command. */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000;

/** What `createBridge` takes; only `backend` is required. */
export interface BridgeOptions {
  /** Runs the commands. */
  backend: SandboxBackend;
  /**
   * Bearer token every route but `/openapi.json` requires. One shorter than
   * {@link MIN_TOKEN_LENGTH} (16) characters is taken, with a `warning` log entry.
   */
  token?: string | undefined;
  /** Serve without a token. Without a token and without this, the bridge refuses to run commands. */
  allowUnauthenticated?: boolean | undefined;
  /** Overrides of {@link DEFAULT_LIMITS}. */
  limits?: Partial<Limits> | undefined;
  /**
   * Most calls running at once and most waiting for a slot; beyond them `/exec` answers 429
   * `capacity_exceeded` (default: {@link defaultAdmission} for this machine).
   */
  admission?: AdmissionOptions | undefined;
  /**
   * The network policy of a call that names none (default `none`) and the most a call may ask
   * for (default: the default). Only for a backend that enforces network policies.
   */
  network?: NetworkOptions | undefined;
  /**
   * Secrets a call may ask for by name (`secrets` in a request): where each value is read, the
   * hosts it may go to, how it is presented (see secrets.ts). Only for a backend whose egress
   * proxy injects them (local with bubblewrap, docker).
   */
  secrets?: SecretsOptions | undefined;
  /**
   * Reads a secret's value when a call asks for it (default: `{ env }` from `process.env`, no
   * files; `startEmbeddedBridge` gives one that reads files too). A host with other sources
   * (a Worker's secret bindings) gives its own.
   */
  readSecret?: SecretReader | undefined;
  /**
   * Web origins whose browser pages may call the bridge (CORS; default: none, and no CORS
   * headers). A request from another origin is refused with 403 before anything runs.
   */
  cors?: CorsOptions | undefined;
  /**
   * Durable calls (off without it): a call's sandbox id is its idempotency key, outcomes are
   * kept `keptSeconds` (default 600) within `maxKept` calls and `maxKeptBytes`, calls may
   * `detach`, `GET /exec/{sandboxId}` answers their state or re-attaches their stream, and a
   * call whose caller's connection dropped runs on `disconnectGraceSeconds` (default 0 here;
   * the Node host's is 10) for a re-attach. A host that cannot keep a call running past its
   * request (a Worker without a Durable Object owning the call) leaves it off.
   */
  durable?: DurableOptions | undefined;
  /** Working directory when a request names none (default `/workspace`). */
  defaultCwd?: string | undefined;
  /** SSE heartbeat interval in ms (default 10 000, at most 15 000). */
  heartbeatIntervalMs?: number | undefined;
  /**
   * Most bytes of events queued for a streamed call's reader (default 256 KiB): a reader that
   * falls further behind has output skipped (counted, kept in the result, reported on the stream).
   */
  streamBufferBytes?: number | undefined;
  /** Receives one structured entry per call (default: JSON lines on the console). */
  logger?: BridgeLogger | undefined;
  /**
   * Keeps sandbox cleanup alive after the response is sent (Workers: `ctx.waitUntil`). Without it
   * the bridge destroys the sandbox before it finishes the response.
   */
  waitUntil?: ((promise: Promise<unknown>) => void) | undefined;
  /** Reported by `/health` (default: this package's version). */
  version?: string | undefined;
  /**
   * The id `/health` and call statuses report as `instance` (default: a random UUID when the
   * bridge is created). It names the bridge's memory of calls: a host whose memory outlives the
   * bridge object (the Worker's CallKeeper storage) gives one that lasts as long.
   */
  instance?: string | undefined;
}

/** Per-request extras; in Workers pass `{ waitUntil: ctx.waitUntil.bind(ctx) }`. */
export interface BridgeRequestContext {
  waitUntil?: ((promise: Promise<unknown>) => void) | undefined;
  /**
   * Who sent the request, as the host knows it (the Node host: the connection's source address;
   * a Worker may pass `CF-Connecting-IP`): the queue holds at most `admission.maxQueuedPerClient`
   * calls of one client and gives free slots round its clients. Undefined: all such requests
   * count as one client, bounded by the whole queue only.
   */
  client?: string | undefined;
}

/**
 * A Fetch API handler, `(request) => Promise<Response>`, with the means to stop it.
 * `shutdown()` refuses new calls, cancels every call in flight, and resolves once their sandboxes
 * are destroyed.
 */
export interface BridgeHandler {
  (request: Request, context?: BridgeRequestContext): Promise<Response>;
  /** Same as calling the handler; handy as `export default { fetch: bridge.fetch }`. */
  readonly fetch: (request: Request, context?: BridgeRequestContext) => Promise<Response>;
  shutdown(): Promise<void>;
  /** Calls in flight: waiting for a slot, running, or having their sandbox destroyed. */
  readonly activeCalls: number;
}

type HonoEnv = {
  Bindings: {
    waitUntil: ((promise: Promise<unknown>) => void) | undefined;
    client: string | undefined;
  };
};

/** Creates the bridge: auth, validation, limits, output caps and the sandbox lifecycle. */
export function createBridge(options: BridgeOptions): BridgeHandler {
  const heartbeatIntervalMs = options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  if (
    !Number.isFinite(heartbeatIntervalMs) ||
    heartbeatIntervalMs <= 0 ||
    heartbeatIntervalMs > MAX_HEARTBEAT_INTERVAL_MS
  ) {
    throw new TypeError(
      `heartbeatIntervalMs must be between 1 and ${MAX_HEARTBEAT_INTERVAL_MS}; got ${heartbeatIntervalMs}.`,
    );
  }
  const streamBufferBytes = options.streamBufferBytes ?? DEFAULT_STREAM_BUFFER_BYTES;
  requireIntegerAtLeast("streamBufferBytes", streamBufferBytes, 1);
  const token = options.token === "" ? undefined : options.token;
  const logger = neverThrows(options.logger ?? jsonLineLogger);
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    logger({ event: "warning", level: "warn", detail: weakToken(token.length) });
  }
  const instance = options.instance ?? crypto.randomUUID();
  if (typeof instance !== "string" || instance.length === 0 || instance.length > 128) {
    throw new TypeError(
      `instance must be a string of 1 to 128 characters; got ${String(instance)}.`,
    );
  }
  const durable = options.durable === undefined ? undefined : resolveDurable(options.durable);
  const calls = new CallRegistry(
    options.backend,
    logger,
    token,
    resolveAdmission(options.admission),
    durable === undefined ? undefined : new KeptCalls(durable),
  );
  const context: ExecRoutesContext = {
    calls,
    instance: { id: instance, startedAt: Date.now() },
    limits: resolveLimits(options.limits),
    defaultCwd: options.defaultCwd ?? DEFAULT_CWD,
    heartbeatIntervalMs,
    streamBufferBytes,
    network: resolveNetwork(options.network, options.backend.networkModes, options.backend.name),
    secrets: resolveSecrets(options.secrets, options.backend, options.readSecret !== undefined),
    readSecret: options.readSecret ?? readSecretFromEnv,
    graceMs: Math.round((durable?.disconnectGraceSeconds ?? 0) * 1000),
  };
  const corsOrigins = resolveCors(options.cors);
  const version = options.version ?? BRIDGE_VERSION;
  const openApi = JSON.stringify(openApiDocument());
  /** The last resort: a protocol error for whatever escaped a route (see `answerError`). */
  const answer = (error: unknown) => answerError(error, logger, token);

  const app = new Hono<HonoEnv>();
  // Every route is a static path. All but the OpenAPI document need the token.
  const tokenRequired = requireToken(token, options.allowUnauthenticated === true);
  app.get("/health", tokenRequired, async () => {
    const body: HealthResponse = {
      ...(await backendHealth(options.backend, logger)),
      ok: true,
      protocol: PROTOCOL_VERSION,
      backend: options.backend.name,
      isolation: options.backend.isolation,
      limits: context.limits,
      admission: calls.load(),
      ...(context.network === undefined
        ? {}
        : { network: { default: context.network.default, ceiling: context.network.ceiling } }),
      ...(context.secrets.length === 0 ? {} : { secrets: secretsReport(context.secrets) }),
      version,
      instance: context.instance.id,
    };
    const durableReport = calls.durableReport();
    if (durableReport !== undefined) body.durable = durableReport;
    return jsonResponse(body);
  });
  app.post("/exec", tokenRequired, (c) =>
    handleExec(context, c.req.raw, c.env.waitUntil, c.env.client),
  );
  if (durable !== undefined) {
    app.get("/exec/:sandboxId", tokenRequired, (c) =>
      handleCallStatus(context, c.req.raw, c.req.param("sandboxId"), wantsEventStream(c.req.raw)),
    );
  }
  app.post("/cancel", tokenRequired, (c) => handleCancel(context, c.req.raw));
  // Public on purpose: the protocol document describes the bridge and runs nothing.
  app.get(
    "/openapi.json",
    () => new Response(openApi, { headers: { "content-type": "application/json; charset=utf-8" } }),
  );
  app.notFound((c) => routeNotFound(app, c));
  app.onError(answer);

  const served = async (request: Request, requestContext?: BridgeRequestContext) => {
    try {
      return await app.fetch(request, {
        waitUntil: requestContext?.waitUntil ?? options.waitUntil,
        client: requestContext?.client,
      });
    } catch (error) {
      // Hono hands only `Error` instances to `onError` and rethrows anything else thrown.
      return answer(error);
    }
  };
  const fetch = corsOrigins === undefined ? served : withCors(served, corsOrigins);
  const handler = ((request: Request, requestContext?: BridgeRequestContext) =>
    fetch(request, requestContext)) as BridgeHandler;
  Object.defineProperties(handler, {
    fetch: { value: fetch },
    shutdown: { value: () => calls.shutdown() },
    activeCalls: { get: () => calls.size },
  });
  return handler;
}

/**
 * The answer for an error thrown while handling a request: an `HttpError` is the protocol error
 * it carries; anything else is a bug, logged (secrets redacted) and answered 500 `internal`.
 */
function answerError(error: unknown, logger: BridgeLogger, token: string | undefined): Response {
  if (HttpError.isInstance(error)) return error.toResponse();
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  logger({ event: "internal_error", level: "error", detail: logDetail(text, [token]) });
  return errorResponse("internal", BRIDGE_TEXTS.internal);
}

/** What the backend adds to `/health`; nothing when it has nothing or its `health()` fails. */
async function backendHealth(
  backend: SandboxBackend,
  logger: BridgeLogger,
): Promise<BackendHealth> {
  if (backend.health === undefined) return {};
  try {
    // Only the fields a backend may add: it cannot override what the bridge reports itself.
    const { warmPool, sandbox } = await backend.health();
    return {
      ...(sandbox === undefined ? {} : { sandbox }),
      ...(warmPool === undefined ? {} : { warmPool }),
    };
  } catch (error) {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    logger({ event: "internal_error", level: "error", detail: logDetail(`health(): ${text}`, []) });
    return {};
  }
}

/** 405 with `Allow` for a known path asked with another method, 404 for an unknown path. */
function routeNotFound(app: Hono<HonoEnv>, c: Context<HonoEnv>): Response {
  const path = c.req.path;
  const routes = app.routes.filter((route) => route.method !== "ALL");
  const methods = [
    ...new Set(routes.filter((route) => route.path === path).map((route) => route.method)),
  ];
  const shown = path.slice(0, 200);
  if (methods.length === 0) {
    const paths = [...new Set(routes.map((route) => route.path))].join(", ");
    return errorResponse("not_found", BRIDGE_TEXTS.notFound(shown, paths));
  }
  // Hono answers HEAD with the GET route.
  const allowed = methods.flatMap((method) => (method === "GET" ? ["GET", "HEAD"] : [method]));
  return errorResponse(
    "method_not_allowed",
    BRIDGE_TEXTS.methodNotAllowed(shown, allowed.join(", "), c.req.method.slice(0, 20)),
    { headers: { allow: allowed.join(", ") } },
  );
}

/** A logger failure must never break a call or leave a sandbox behind. */
function neverThrows(logger: BridgeLogger): BridgeLogger {
  return (entry) => {
    try {
      logger(entry);
    } catch {
      // logging is best effort
    }
  };
}
