/**
 * `CallKeeper`: the Durable Object that owns one durable call (one object per sandbox id, with
 * `DURABLE_CALLS` on). Every request about its id reaches it (durable-routes.ts), so its bridge
 * (the bridge core with durable calls, one call at most) runs the call, lets repeated `POST
 * /exec`s and `GET /exec/{id}`s attach to it, and keeps its outcome, whatever became of the
 * caller. The object stays alive while the call runs (`waitUntil` on the call's end, an alarm as
 * backstop) and writes what it must never forget to its storage: that the call started (so a
 * restarted object never runs it again) and, once it ended, its status with the result. After
 * `KEPT_SECONDS` its alarm drops the result and leaves the id `expired` for a day, then deletes
 * everything. Its answers name the keeper (its Durable Object id) as their `instance`: its
 * storage is the memory of its call, and outlives the object's restarts. An id its storage has
 * no record of was never run here within the last day: its `unknown` says so
 * (`rememberedSeconds`), so a caller whose request was cut before it arrived sends it again.
 */
import { DurableObject } from "cloudflare:workers";
import {
  type BridgeHandler,
  type BridgeLogger,
  DEFAULT_LIMITS,
  errorResponse,
  jsonLineLogger,
} from "@remote-task/bridge";
import { BRIDGE_TEXTS } from "@remote-task/internal";
import {
  type CallStatus,
  type ExecResult,
  PROTOCOL_VERSION,
  type StreamEvent,
} from "@remote-task/protocol";
import { buildBridge } from "./bridge-setup.js";
import { type CallKeeperRpc, ConfigError, type WorkerEnv, workerConfig } from "./config.js";

/** What the object's storage holds of its call. */
type KeptRecord =
  /** The call was accepted here; `backstopAt` is past its deadline. */
  | { kind: "started"; command: string; backstopAt: number }
  /** The call ended: its status (with its result or error) until `expiresAt`. */
  | { kind: "finished"; command: string; status: CallStatus; expiresAt: number }
  /** The outcome is gone: the id answers `expired` until `forgetAt`. */
  | { kind: "expired"; forgetAt: number };

const RECORD_KEY = "call";
/** How long past its deadline a call's start is remembered should its end never be seen. */
const BACKSTOP_MS = 120_000;
/** How long an expired id answers `expired` before it is forgotten (then `unknown`). */
const EXPIRED_FOR_MS = 24 * 3600_000;

const encoder = new TextEncoder();

function frame(event: StreamEvent): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

function eventStream(events: StreamEvent[]): Response {
  return new Response(events.map(frame).join(""), {
    headers: { "content-type": "text/event-stream", "cache-control": "no-store" },
  });
}

/** The retained tail of one output from byte `from` on (skipped bytes before the tail). */
function tailFrom(
  stream: "stdout" | "stderr",
  result: ExecResult,
  from: number,
): StreamEvent | undefined {
  const bytes = encoder.encode(result[stream]);
  const total = result[`${stream}Bytes`] ?? bytes.byteLength;
  const tailStart = Math.max(0, total - bytes.byteLength);
  if (from >= total) return undefined;
  if (from <= tailStart) {
    const skipped = tailStart - from;
    return skipped > 0
      ? { type: stream, data: result[stream], skippedBytes: skipped }
      : { type: stream, data: result[stream] };
  }
  return { type: stream, data: new TextDecoder().decode(bytes.subarray(from - tailStart)) };
}

function wantsStream(request: Request): boolean {
  return (request.headers.get("accept") ?? "").includes("text/event-stream");
}

function offset(url: URL, name: string): number {
  const value = Number(url.searchParams.get(name) ?? 0);
  return Number.isSafeInteger(value) && value > 0 ? value : 0;
}

/** The `CallKeeper` Durable Object (binding `CallKeeper`); see the top of this file. */
export class CallKeeper extends DurableObject<WorkerEnv> implements CallKeeperRpc {
  #bridge: { key: string; handler: BridgeHandler } | undefined;
  /** The watch on the call's end, while one runs. */
  #watching: Promise<void> | undefined;
  /** Tells the watch the call ended (its bridge logged its outcome). */
  #ended: (() => void) | undefined;

  /** The `instance` of this keeper's answers: its Durable Object id, as long-lived as its storage. */
  get #instance(): string {
    return this.ctx.id.toString();
  }

  /**
   * Answers one request about this object's call (`POST /exec`, `POST /cancel`, `GET
   * /exec/{id}`), configured by the Worker's variables `vars`.
   */
  async serve(
    request: Request,
    sandboxId: string,
    vars: Record<string, string>,
  ): Promise<Response> {
    const bridge = this.#bridgeFor(vars);
    if (ConfigError.isInstance(bridge)) return errorResponse("not_configured", bridge.message);
    const url = new URL(request.url);
    const known = await this.#status(bridge, request, sandboxId);
    // Refused (no token, a wrong one) or known to the bridge: the bridge answers.
    if (url.pathname === "/cancel" || known === "refused" || known.state !== "unknown") {
      return bridge.fetch(request, { waitUntil: (p) => this.ctx.waitUntil(p) });
    }
    const record = await this.ctx.storage.get<KeptRecord>(RECORD_KEY);
    if (record !== undefined) return this.#fromRecord(record, request, url, sandboxId);
    if (request.method !== "POST") {
      if (wantsStream(request)) return bridge.fetch(request);
      return Response.json({
        sandboxId,
        state: "unknown",
        instance: this.#instance,
        rememberedSeconds: EXPIRED_FOR_MS / 1000,
      } satisfies CallStatus);
    }
    return this.#newCall(bridge, request, sandboxId, vars);
  }

  override async alarm(): Promise<void> {
    const record = await this.ctx.storage.get<KeptRecord>(RECORD_KEY);
    if (record === undefined) return;
    const now = Date.now();
    if (record.kind === "started") {
      if (this.#watching !== undefined) {
        await this.ctx.storage.setAlarm(now + BACKSTOP_MS);
        return;
      }
      await this.#expire();
    } else if (record.kind === "finished") {
      await this.#expire();
    } else {
      await this.ctx.storage.deleteAll();
    }
  }

  /** Drops the outcome (storage and memory): the id answers `expired` for a day. */
  async #expire(): Promise<void> {
    const forgetAt = Date.now() + EXPIRED_FOR_MS;
    await this.ctx.storage.put<KeptRecord>(RECORD_KEY, { kind: "expired", forgetAt });
    await this.ctx.storage.setAlarm(forgetAt);
    const bridge = this.#bridge;
    this.#bridge = undefined;
    if (bridge !== undefined) await bridge.handler.shutdown();
  }

  #bridgeFor(vars: Record<string, string>): BridgeHandler | ConfigError {
    const key = JSON.stringify(vars);
    if (this.#bridge?.key === key) return this.#bridge.handler;
    const env = { ...this.env, ...vars } as WorkerEnv;
    const config = workerConfig(env);
    if (ConfigError.isInstance(config)) return config;
    // The call's one log line comes once its outcome is decided: then it is written down.
    const logger: BridgeLogger = (entry) => {
      jsonLineLogger(entry);
      if (entry.event === "exec") this.#ended?.();
    };
    const { handler } = buildBridge(env, config, logger, this.#instance);
    this.#bridge = { key, handler };
    return handler;
  }

  /**
   * The call's status as the bridge knows it (`unknown` when it never ran in this object's
   * memory), asked with the request's credentials: `refused` when they are not accepted.
   */
  async #status(
    bridge: BridgeHandler,
    request: Request,
    sandboxId: string,
  ): Promise<CallStatus | "refused"> {
    const headers = new Headers();
    const auth = request.headers.get("authorization");
    if (auth !== null) headers.set("authorization", auth);
    const response = await bridge.fetch(
      new Request(`https://keeper.internal/exec/${sandboxId}`, { headers }),
    );
    if (!response.ok) return "refused";
    return (await response.json()) as CallStatus;
  }

  /** A call new to this object: remembered as started, run by the bridge, watched to its end. */
  async #newCall(
    bridge: BridgeHandler,
    request: Request,
    sandboxId: string,
    vars: Record<string, string>,
  ): Promise<Response> {
    let command = "";
    let timeoutSeconds: number | undefined;
    try {
      const parsed = (await request.clone().json()) as {
        command?: unknown;
        timeoutSeconds?: unknown;
      };
      if (typeof parsed.command === "string") command = parsed.command;
      if (typeof parsed.timeoutSeconds === "number") timeoutSeconds = parsed.timeoutSeconds;
    } catch {
      return bridge.fetch(request);
    }
    const config = workerConfig({ ...this.env, ...vars } as WorkerEnv);
    const longest = ConfigError.isInstance(config) ? undefined : config.limits.maxTimeoutSeconds;
    const deadlineSeconds = timeoutSeconds ?? longest ?? DEFAULT_LIMITS.maxTimeoutSeconds;
    const backstopAt = Date.now() + deadlineSeconds * 1000 + BACKSTOP_MS;
    await this.ctx.storage.put<KeptRecord>(RECORD_KEY, { kind: "started", command, backstopAt });
    await this.ctx.storage.setAlarm(backstopAt);
    const ended = new Promise<void>((resolve) => {
      this.#ended = resolve;
    });
    const watch = this.#keepWhenEnded(bridge, request, sandboxId, command, ended);
    this.#watching = watch;
    // The object stays alive until the call's outcome is written (a detached call's response
    // is long gone by then).
    this.ctx.waitUntil(watch);
    const response = await bridge.fetch(request, { waitUntil: (p) => this.ctx.waitUntil(p) });
    // Refused before it ran (invalid, unauthorised, no room): there is no end to wait for.
    const after = await this.#status(bridge, request, sandboxId);
    if (after === "refused" || after.state === "unknown") this.#ended?.();
    return response;
  }

  /**
   * Once the call ended (its bridge logged it), writes its status with the outcome, or forgets a
   * call the bridge refused.
   */
  async #keepWhenEnded(
    bridge: BridgeHandler,
    request: Request,
    sandboxId: string,
    command: string,
    ended: Promise<void>,
  ): Promise<void> {
    try {
      await ended;
      if (this.#bridge?.handler !== bridge) return;
      const found = await this.#status(bridge, request, sandboxId);
      const state = found === "refused" ? "unknown" : found.state;
      if (found !== "refused" && state === "finished") {
        const expiresAt = Date.now() + (found.keptForSeconds ?? 0) * 1000;
        const { keptForSeconds: _left, ...status } = found;
        await this.ctx.storage.put<KeptRecord>(RECORD_KEY, {
          kind: "finished",
          command,
          status,
          expiresAt,
        });
        await this.ctx.storage.setAlarm(expiresAt);
      } else if (state === "expired") {
        await this.#expire();
      } else {
        await this.ctx.storage.delete(RECORD_KEY);
        await this.ctx.storage.deleteAlarm();
      }
    } finally {
      this.#watching = undefined;
      this.#ended = undefined;
    }
  }

  /** The answer from storage, for a call this object's memory no longer holds. */
  async #fromRecord(
    record: KeptRecord,
    request: Request,
    url: URL,
    sandboxId: string,
  ): Promise<Response> {
    const streamed = wantsStream(request);
    if (record.kind !== "finished") {
      if (request.method === "POST") {
        return errorResponse("conflict", BRIDGE_TEXTS.conflictExpired(sandboxId));
      }
      if (streamed) {
        return eventStream([
          { type: "start", sandboxId, protocol: PROTOCOL_VERSION },
          {
            type: "error",
            error: { error: BRIDGE_TEXTS.notKept(sandboxId, "expired"), code: "not_found" },
          },
        ]);
      }
      return Response.json({
        sandboxId,
        state: "expired",
        instance: this.#instance,
      } satisfies CallStatus);
    }
    const keptForSeconds = Math.max(0, Math.round((record.expiresAt - Date.now()) / 1000));
    const status: CallStatus = { ...record.status, keptForSeconds, instance: this.#instance };
    let detach = false;
    if (request.method === "POST") {
      const body = (await request.json().catch(() => ({}))) as {
        command?: unknown;
        detach?: unknown;
      };
      if (body.command !== record.command) {
        return errorResponse("conflict", BRIDGE_TEXTS.conflictOtherCommand(sandboxId));
      }
      detach = body.detach === true;
    }
    if (detach) return Response.json(status, { status: 202 });
    if (streamed) {
      const events: StreamEvent[] = [{ type: "start", sandboxId, protocol: PROTOCOL_VERSION }];
      const result = status.result;
      if (result !== undefined) {
        const from = {
          stdout: request.method === "GET" ? offset(url, "stdoutFrom") : 0,
          stderr: request.method === "GET" ? offset(url, "stderrFrom") : 0,
        };
        for (const stream of ["stdout", "stderr"] as const) {
          const event = tailFrom(stream, result, from[stream]);
          if (event !== undefined) events.push(event);
        }
        events.push({ type: "exit", result });
      } else if (status.error !== undefined) {
        events.push({ type: "error", error: status.error });
      }
      return eventStream(events);
    }
    if (request.method === "GET") return Response.json(status);
    if (status.result !== undefined) return Response.json(status.result);
    const error = status.error ?? { error: BRIDGE_TEXTS.sandboxFailed, code: "sandbox_error" };
    return errorResponse(error.code, error.error, error);
  }
}
