import {
  type CancelResponse,
  cancelRequestSchema,
  DEFAULT_CWD,
  DEFAULT_TIMEOUT_SECONDS,
  type ExecRequest,
  type ExecResult,
  execRequestSchema,
  type HealthResponse,
  type Issue,
  type Limits,
  MAX_HEARTBEAT_INTERVAL_MS,
  openApiDocument,
  PROTOCOL_VERSION,
  type StreamEvent,
} from "@remote-task/protocol";
import { Hono } from "hono";
import { bearerToken, timingSafeEqual } from "./auth.js";
import type { ExecSpec, RunningCommand, SandboxBackend } from "./backend.js";
import { mapBackendError } from "./backend-errors.js";
import { assertJsonContentType, parseJsonBody, readBodyLimited, validate } from "./body.js";
import { ExecCall as Call, type ConsumeOutcome, consumeOutput, endedResult } from "./call.js";
import { outputCapFor, resolveLimits } from "./limits.js";
import { type BridgeLogger, jsonLineLogger, redact } from "./logger.js";
import { ForwardGate, TailBuffer } from "./output.js";
import { errorResponse, HttpError, invalidRequest, jsonResponse, responseOf } from "./responses.js";
import { BRIDGE_VERSION } from "./version.js";

/** Default interval between SSE heartbeats of a quiet command. */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000;

export interface BridgeOptions {
  /** Runs the commands. */
  backend: SandboxBackend;
  /** Bearer token every route but `/openapi.json` requires. */
  token?: string;
  /** Serve without a token. Without a token and without this, the bridge refuses to run commands. */
  allowUnauthenticated?: boolean;
  /** Overrides of {@link DEFAULT_LIMITS}. */
  limits?: Partial<Limits>;
  /** Working directory when a request names none (default `/workspace`). */
  defaultCwd?: string;
  /** SSE heartbeat interval in ms (default 10 000, at most 15 000). */
  heartbeatIntervalMs?: number;
  /** Receives one structured entry per call (default: JSON lines on the console). */
  logger?: BridgeLogger;
  /**
   * Keeps sandbox cleanup alive after the response is sent (Workers: `ctx.waitUntil`). Without it
   * the bridge destroys the sandbox before it finishes the response.
   */
  waitUntil?: (promise: Promise<unknown>) => void;
  /** Reported by `/health` (default: this package's version). */
  version?: string;
}

/** Per-request extras; in Workers pass `{ waitUntil: ctx.waitUntil.bind(ctx) }`. */
export interface BridgeRequestContext {
  waitUntil?: (promise: Promise<unknown>) => void;
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
  /** Calls whose sandbox is not yet destroyed. */
  readonly activeCalls: number;
}

interface BridgeState {
  backend: SandboxBackend;
  limits: Limits;
  logger: BridgeLogger;
  defaultCwd: string;
  heartbeatIntervalMs: number;
  calls: Map<string, Call>;
  cleanups: Set<Promise<void>>;
  closed: boolean;
  token: string | undefined;
}

const ROUTES: Record<string, string> = {
  "/health": "GET, HEAD",
  "/exec": "POST",
  "/cancel": "POST",
  "/openapi.json": "GET, HEAD",
};

const encoder = new TextEncoder();
/** Longest delay a timer accepts (longer ones fire at once). */
const MAX_TIMER_MS = 2_147_483_647;

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
  const token = options.token === "" ? undefined : options.token;
  const state: BridgeState = {
    backend: options.backend,
    limits: resolveLimits(options.limits),
    logger: neverThrows(options.logger ?? jsonLineLogger),
    defaultCwd: options.defaultCwd ?? DEFAULT_CWD,
    heartbeatIntervalMs,
    calls: new Map(),
    cleanups: new Set(),
    closed: false,
    token,
  };
  const configured = token !== undefined || options.allowUnauthenticated === true;
  const version = options.version ?? BRIDGE_VERSION;
  const openApi = JSON.stringify(openApiDocument());

  type Env = { Bindings: { waitUntil: ((p: Promise<unknown>) => void) | undefined } };
  const app = new Hono<Env>();

  app.get(
    "/openapi.json",
    () => new Response(openApi, { headers: { "content-type": "application/json; charset=utf-8" } }),
  );

  app.use("*", async (c, next) => {
    const allowed = ROUTES[c.req.path];
    if (allowed === undefined) {
      return errorResponse(
        "not_found",
        `No route ${c.req.path.slice(0, 200)}; routes are ${Object.keys(ROUTES).join(", ")}.`,
      );
    }
    if (!allowed.split(", ").includes(c.req.method)) {
      return errorResponse(
        "method_not_allowed",
        `${c.req.path.slice(0, 200)} accepts ${allowed}, not ${c.req.method.slice(0, 20)}.`,
        {
          headers: { allow: allowed },
        },
      );
    }
    if (!configured) {
      return errorResponse(
        "not_configured",
        "This bridge has no token configured, so it refuses to run commands. Set BRIDGE_TOKEN (or pass `token` to the bridge), or opt out explicitly with allowUnauthenticated.",
      );
    }
    if (token !== undefined) {
      const given = bearerToken(c.req.header("authorization") ?? null);
      if (given === undefined || !(await timingSafeEqual(given, token))) {
        return errorResponse(
          "unauthorized",
          "Missing or wrong bearer token; send Authorization: Bearer <token>.",
          {
            headers: { "www-authenticate": 'Bearer realm="remote-task"' },
          },
        );
      }
    }
    await next();
  });

  app.get("/health", () => {
    const body: HealthResponse = {
      ok: true,
      protocol: PROTOCOL_VERSION,
      backend: state.backend.name,
      isolation: state.backend.isolation,
      limits: state.limits,
      ...(state.backend.sandbox === undefined ? {} : { sandbox: state.backend.sandbox }),
      version,
    };
    return jsonResponse(body);
  });

  app.post("/exec", async (c) => handleExec(state, c.req.raw, c.env.waitUntil));
  app.post("/cancel", async (c) => handleCancel(state, c.req.raw));

  app.notFound((c) => errorResponse("not_found", `No route ${c.req.path.slice(0, 200)}.`));
  app.onError((error) => {
    if (error instanceof HttpError) return error.toResponse();
    state.logger({ event: "internal_error", level: "error", detail: safeDetail(error, state) });
    return errorResponse("internal", "The bridge failed unexpectedly; the bridge log has details.");
  });

  const fetch = async (request: Request, context?: BridgeRequestContext): Promise<Response> => {
    try {
      return await app.fetch(request, { waitUntil: context?.waitUntil ?? options.waitUntil });
    } catch (error) {
      state.logger({
        event: "internal_error",
        level: "error",
        detail: safeDetail(error, state),
      });
      return errorResponse(
        "internal",
        "The bridge failed unexpectedly; the bridge log has details.",
      );
    }
  };

  const handler = ((request: Request, context?: BridgeRequestContext) =>
    fetch(request, context)) as BridgeHandler;
  Object.defineProperties(handler, {
    fetch: { value: fetch },
    shutdown: {
      value: async (): Promise<void> => {
        state.closed = true;
        while (state.calls.size > 0 || state.cleanups.size > 0) {
          for (const call of state.calls.values()) call.end("shutdown");
          await Promise.allSettled([
            ...[...state.calls.values()].map((call) => call.cleaned),
            ...state.cleanups,
          ]);
        }
      },
    },
    activeCalls: { get: () => state.calls.size },
  });
  return handler;
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

/** `text` without the token or any env value of the call, bounded in length. */
function redactSecrets(
  text: string,
  state: BridgeState,
  env: Readonly<Record<string, string>>,
): string {
  const secrets = [...Object.values(env)];
  if (state.token !== undefined) secrets.push(state.token);
  return redact(text, secrets).slice(0, 2_000);
}

function safeDetail(error: unknown, state: BridgeState): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return redactSecrets(text, state, {});
}

function utf8Length(text: string): number {
  return encoder.encode(text).byteLength;
}

/** Parses and validates an `/exec` body against the protocol schema and the bridge limits. */
async function readExecRequest(state: BridgeState, request: Request): Promise<ExecRequest> {
  assertJsonContentType(request);
  const body = parseJsonBody(await readBodyLimited(request, state.limits.maxRequestBytes));
  const exec = validate(execRequestSchema, body, "Exec request");
  const { limits } = state;
  const issues: Issue[] = [];
  if (utf8Length(exec.command) > limits.maxCommandBytes) {
    issues.push({
      path: ["command"],
      message: `command is longer than ${limits.maxCommandBytes} bytes`,
    });
  }
  if (exec.timeoutSeconds !== undefined && exec.timeoutSeconds > limits.maxTimeoutSeconds) {
    issues.push({
      path: ["timeoutSeconds"],
      message: `timeoutSeconds must be at most ${limits.maxTimeoutSeconds}`,
    });
  }
  const env = Object.entries(exec.env ?? {});
  if (env.length > limits.maxEnvEntries) {
    issues.push({ path: ["env"], message: `env has more than ${limits.maxEnvEntries} entries` });
  }
  for (const [name, value] of env) {
    if (utf8Length(name) + utf8Length(value) > limits.maxEnvEntryBytes) {
      issues.push({
        path: ["env", name],
        message: `env entry is longer than ${limits.maxEnvEntryBytes} bytes (name plus value)`,
      });
    }
  }
  if (issues.length > 0)
    throw invalidRequest("Exec request exceeds the bridge limits: see issues.", issues);
  return exec;
}

function wantsEventStream(request: Request): boolean {
  const accept = request.headers.get("accept") ?? "";
  return accept
    .split(",")
    .some((part) => part.split(";")[0]?.trim().toLowerCase() === "text/event-stream");
}

/** Destroys the call's sandbox once `start` has settled, then releases the id. */
function cleanUp(
  state: BridgeState,
  call: Call,
  started: Promise<unknown>,
  timer: ReturnType<typeof setTimeout>,
): Promise<void> {
  clearTimeout(timer);
  const cleanup = (async () => {
    await started.catch(() => {});
    try {
      await state.backend.destroy(call.sandboxId);
    } catch (error) {
      state.logger({
        event: "destroy_failed",
        level: "error",
        sandboxId: call.sandboxId,
        detail: safeDetail(error, state),
      });
    } finally {
      state.calls.delete(call.sandboxId);
      call.markCleaned();
    }
  })();
  state.cleanups.add(cleanup);
  void cleanup.finally(() => state.cleanups.delete(cleanup));
  return cleanup;
}

async function handleExec(
  state: BridgeState,
  request: Request,
  waitUntil: ((p: Promise<unknown>) => void) | undefined,
): Promise<Response> {
  const exec = await readExecRequest(state, request);
  if (state.closed) {
    return errorResponse(
      "capacity_exceeded",
      "The bridge is shutting down; try another bridge or retry shortly.",
      {
        retryAfterSeconds: 1,
      },
    );
  }
  if (state.calls.has(exec.sandboxId)) {
    return errorResponse(
      "conflict",
      `Sandbox id ${exec.sandboxId} is already in use by a running call; use a fresh id per call.`,
    );
  }
  const streamed = wantsEventStream(request);
  const call = new Call(exec.sandboxId, streamed);
  state.calls.set(exec.sandboxId, call);

  const env = exec.env ?? {};
  const timeoutSeconds =
    exec.timeoutSeconds ?? Math.min(DEFAULT_TIMEOUT_SECONDS, state.limits.maxTimeoutSeconds);
  const timeoutMs = Math.round(timeoutSeconds * 1000);
  const timer = setTimeout(() => call.end("timeout"), Math.min(timeoutMs, MAX_TIMER_MS));
  const onDisconnect = () => call.end("disconnect");
  if (request.signal.aborted) onDisconnect();
  else request.signal.addEventListener("abort", onDisconnect, { once: true });

  const spec: ExecSpec = {
    sandboxId: exec.sandboxId,
    command: exec.command,
    cwd: exec.cwd ?? state.defaultCwd,
    env,
    timeoutMs,
    signal: call.signal,
  };
  const cap = outputCapFor(state.limits, exec.maxOutputBytes);
  const tails = { stdout: new TailBuffer(cap), stderr: new TailBuffer(cap) };
  let started: Promise<RunningCommand>;
  try {
    started = Promise.resolve(state.backend.start(spec));
  } catch (error) {
    started = Promise.reject(error);
  }
  started.catch(() => {});

  const finish = async (): Promise<void> => {
    request.signal.removeEventListener("abort", onDisconnect);
    const cleanup = cleanUp(state, call, started, timer);
    if (waitUntil !== undefined) waitUntil(cleanup);
    else await cleanup;
  };
  const log = (outcome: ConsumeOutcome) => logCall(state, call, outcome, env);
  const failed = (error: unknown) => {
    const mapped = mapBackendError(error);
    return responseOf(mapped.body, mapped.headers);
  };

  let running: RunningCommand;
  try {
    const first = await call.race(started);
    if (first.ended) {
      call.settled = true;
      const result = endedResult(call, tails, first.reason);
      log({ kind: "result", result });
      await finish();
      return streamed
        ? eventStreamOf([startEvent(exec.sandboxId), { type: "exit", result }])
        : jsonResponse(result);
    }
    running = first.value;
  } catch (error) {
    call.settled = true;
    log({ kind: "failed", error, stdoutBytes: 0, stderrBytes: 0 });
    await finish();
    return failed(error);
  }

  if (!streamed) {
    const outcome = await consumeOutput(call, running, tails);
    log(outcome);
    await finish();
    return outcome.kind === "result" ? jsonResponse(outcome.result) : failed(outcome.error);
  }
  return streamExec(state, call, running, tails, cap, exec.sandboxId, log, finish);
}

function startEvent(sandboxId: string): StreamEvent {
  return { type: "start", sandboxId, protocol: PROTOCOL_VERSION };
}

function sseFrame(event: StreamEvent): Uint8Array {
  return encoder.encode(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
}

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-store",
  "x-accel-buffering": "no",
} as const;

function eventStreamOf(events: StreamEvent[]): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const event of events) controller.enqueue(sseFrame(event));
      controller.close();
    },
  });
  return new Response(body, { headers: SSE_HEADERS });
}

function streamExec(
  state: BridgeState,
  call: Call,
  running: RunningCommand,
  tails: { stdout: TailBuffer; stderr: TailBuffer },
  cap: number,
  sandboxId: string,
  log: (outcome: ConsumeOutcome) => void,
  finish: () => Promise<void>,
): Response {
  const gates = { stdout: new ForwardGate(cap), stderr: new ForwardGate(cap) };
  let open = true;
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const send = (event: StreamEvent) => {
        if (!open) return;
        try {
          controller.enqueue(sseFrame(event));
        } catch {
          open = false;
        }
      };
      send(startEvent(sandboxId));
      heartbeat = setInterval(
        () => send({ type: "heartbeat", elapsedMs: Date.now() - call.startedAt }),
        state.heartbeatIntervalMs,
      );
      void (async () => {
        const outcome = await consumeOutput(call, running, tails, (stream, bytes) => {
          const text = gates[stream].take(bytes);
          if (text.length > 0) send({ type: stream, data: text });
        });
        clearInterval(heartbeat);
        for (const stream of ["stdout", "stderr"] as const) {
          const rest = gates[stream].flush();
          if (rest.length > 0) send({ type: stream, data: rest });
        }
        log(outcome);
        await finish();
        if (outcome.kind === "result") send({ type: "exit", result: outcome.result });
        else send({ type: "error", error: mapBackendError(outcome.error).body });
        if (open) {
          open = false;
          try {
            controller.close();
          } catch {
            // already cancelled by the client
          }
        }
      })();
    },
    cancel() {
      open = false;
      clearInterval(heartbeat);
      call.end("disconnect");
    },
  });
  return new Response(body, { headers: SSE_HEADERS });
}

/** Logs one line for the call. */
function logCall(
  state: BridgeState,
  call: Call,
  outcome: ConsumeOutcome,
  env: Readonly<Record<string, string>>,
): void {
  const base = {
    event: "exec" as const,
    sandboxId: call.sandboxId,
    durationMs: Date.now() - call.startedAt,
    streamed: call.streamed,
    ...(call.endedBy === undefined ? {} : { endedBy: call.endedBy }),
  };
  if (outcome.kind === "result") {
    const result: ExecResult = outcome.result;
    state.logger({
      ...base,
      level: "info",
      outcome: result.outcome ?? "exited",
      code: result.code,
      stdoutBytes: result.stdoutBytes ?? 0,
      stderrBytes: result.stderrBytes ?? 0,
    });
    return;
  }
  const mapped = mapBackendError(outcome.error);
  state.logger({
    ...base,
    level: "error",
    outcome: "error",
    errorCode: mapped.body.code,
    stdoutBytes: outcome.stdoutBytes,
    stderrBytes: outcome.stderrBytes,
    ...(mapped.detail === undefined ? {} : { detail: redactSecrets(mapped.detail, state, env) }),
  });
}

async function handleCancel(state: BridgeState, request: Request): Promise<Response> {
  assertJsonContentType(request);
  const body = parseJsonBody(await readBodyLimited(request, state.limits.maxRequestBytes));
  const { sandboxId } = validate(cancelRequestSchema, body, "Cancel request");
  const call = state.calls.get(sandboxId);
  let cancelled = false;
  if (call !== undefined) {
    cancelled = call.end("cancel");
    await call.cleaned;
  } else {
    try {
      await state.backend.destroy(sandboxId);
    } catch (error) {
      state.logger({
        event: "destroy_failed",
        level: "error",
        sandboxId,
        detail: safeDetail(error, state),
      });
    }
  }
  const answer: CancelResponse = { ok: true, sandboxId, cancelled };
  return jsonResponse(answer);
}
