/**
 * Durable calls on the wire: `GET /exec/{sandboxId}` (a call's state, waiting for its end, or its
 * event stream re-attached from byte offsets), and the answer to a `POST /exec` whose id names a
 * call in flight or a kept outcome (never a second run). A re-attached reader holds the call
 * like its caller does: a call without `detach` is not ended while one is attached.
 */
import { BRIDGE_TEXTS } from "@remote-task/internal";
import {
  type CallStatus,
  type ExecRequest,
  type ExecResult,
  type StreamEvent,
  sandboxIdSchema,
} from "@remote-task/protocol";
import type { ExecCall } from "./call.js";
import { type CallRegistry, type FoundCall, keptOutcome } from "./calls.js";
import type { KeptCall, KeptOutcome } from "./kept.js";
import { entryFrom, type StreamOffsets } from "./replay.js";
import { errorResponse, HttpError, invalidRequest, jsonResponse } from "./responses.js";
import { eventStreamOf, framePieces, SSE_HEADERS, startEvent } from "./sse.js";

/** Longest `waitSeconds` a status request waits, so an idle connection is not cut on its way. */
const MAX_WAIT_SECONDS = 60;

/** The bridge instance that answers: its id and when it started (`Date.now()` time). */
export interface BridgeInstance {
  readonly id: string;
  readonly startedAt: number;
}

/** What the durable routes need from the bridge. */
export interface ReattachContext {
  calls: CallRegistry;
  instance: BridgeInstance;
  heartbeatIntervalMs: number;
  /** Most bytes of events queued for a reader. */
  streamBufferBytes: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A query parameter as a number of at least 0 (default 0); refuses anything else (400). */
function queryNumber(url: URL, name: string, whole: boolean): number {
  const text = url.searchParams.get(name);
  if (text === null || text === "") return 0;
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0 || (whole && !Number.isSafeInteger(value))) {
    throw invalidRequest(BRIDGE_TEXTS.badQuery(name), [
      { path: [name], message: BRIDGE_TEXTS.badQuery(name) },
    ]);
  }
  return value;
}

/** The sandbox id of the path, lower-cased as `/exec` takes it; refuses an invalid one (400). */
function pathSandboxId(raw: string): string {
  let decoded = raw;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    // not percent-encoding: checked as it is (and refused)
  }
  const lowered = decoded.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
  const parsed = sandboxIdSchema.safeParse(lowered);
  if (!parsed.success) {
    const message = parsed.error.issues[0]?.message ?? "invalid sandbox id";
    throw invalidRequest(`Invalid sandbox id: ${message}.`, [{ path: ["sandboxId"], message }]);
  }
  return parsed.data;
}

/** The kept form of a live call's outcome, once decided. */
function liveOutcome(call: ExecCall): KeptOutcome | undefined {
  return call.settledOutcome === undefined ? undefined : keptOutcome(call.settledOutcome);
}

/**
 * Seconds back this instance knows every id sent to it: since it started, or since it last
 * forgot an id (kept.ts), to the millisecond, rounded down.
 */
function rememberedSeconds(context: ReattachContext): number {
  const forgot = context.calls.kept?.forgottenUpTo;
  const since = Math.max(context.instance.startedAt, forgot ?? context.instance.startedAt);
  return Math.max(0, Math.floor(Date.now() - since)) / 1000;
}

/** A call's `CallStatus`, with the instance that answers; a finished one is marked as received. */
function statusOf(
  context: ReattachContext,
  sandboxId: string,
  found: FoundCall | undefined,
): CallStatus {
  const instance = context.instance.id;
  if (found === undefined) {
    return {
      sandboxId,
      state: "unknown",
      instance,
      rememberedSeconds: rememberedSeconds(context),
    };
  }
  if (found.kind === "expired") return { sandboxId, state: "expired", instance };
  const keptSeconds = context.calls.kept?.settings.keptSeconds ?? 0;
  let outcome: KeptOutcome | undefined;
  let keptForSeconds = keptSeconds;
  if (found.kind === "live") {
    outcome = liveOutcome(found.call);
    if (outcome === undefined) return { sandboxId, state: found.call.state, instance };
    found.call.delivered = true;
  } else {
    outcome = found.call.outcome;
    found.call.delivered = true;
    keptForSeconds = Math.max(0, Math.round((found.call.expiresAt - Date.now()) / 1000));
  }
  return {
    sandboxId,
    state: "finished",
    ...(outcome.kind === "result" ? { result: outcome.result } : { error: outcome.error }),
    keptForSeconds,
    instance,
  };
}

/** Waits for the call's outcome, at most `ms`, or until `signal` aborts. */
async function waitForEnd(call: ExecCall, ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || call.settledOutcome !== undefined) return;
  const leave = call.attach();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onAbort: (() => void) | undefined;
  try {
    await Promise.race([
      call.outcome,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
        onAbort = () => resolve();
        signal.addEventListener("abort", onAbort, { once: true });
      }),
    ]);
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal.removeEventListener("abort", onAbort);
    leave();
  }
}

/** `GET /exec/{sandboxId}`: the call's `CallStatus` (waiting up to `waitSeconds`), or its stream. */
export async function handleCallStatus(
  context: ReattachContext,
  request: Request,
  rawSandboxId: string,
  streamed: boolean,
): Promise<Response> {
  const sandboxId = pathSandboxId(rawSandboxId);
  const url = new URL(request.url);
  if (streamed) {
    const from = {
      stdout: queryNumber(url, "stdoutFrom", true),
      stderr: queryNumber(url, "stderrFrom", true),
    };
    return reattachStream(context, sandboxId, context.calls.lookup(sandboxId), from, request);
  }
  const waitSeconds = Math.min(queryNumber(url, "waitSeconds", false), MAX_WAIT_SECONDS);
  const found = context.calls.lookup(sandboxId);
  // A call waited for answers from itself: its outcome is the answer even when it is not kept.
  if (found?.kind === "live") await waitForEnd(found.call, waitSeconds * 1000, request.signal);
  return jsonResponse(statusOf(context, sandboxId, found));
}

/**
 * The answer to a `POST /exec` whose id names a call in flight or kept: the call's (its result
 * when it ends, or its stream from the start; a detached request gets its `CallStatus`). An id
 * whose outcome expired, or of a call of another command, is refused 409: nothing runs again.
 */
export async function answerExisting(
  context: ReattachContext,
  found: FoundCall,
  exec: ExecRequest,
  request: Request,
  streamed: boolean,
): Promise<Response> {
  if (found.kind === "expired") {
    throw new HttpError("conflict", BRIDGE_TEXTS.conflictExpired(exec.sandboxId));
  }
  if (found.call.command !== exec.command) {
    throw new HttpError("conflict", BRIDGE_TEXTS.conflictOtherCommand(exec.sandboxId));
  }
  if (exec.detach === true) {
    return jsonResponse(statusOf(context, exec.sandboxId, found), 202);
  }
  if (streamed) {
    return reattachStream(context, exec.sandboxId, found, { stdout: 0, stderr: 0 }, request);
  }
  let outcome: KeptOutcome;
  if (found.kind === "live") {
    const call = found.call;
    const leave = call.attach();
    request.signal.addEventListener("abort", leave, { once: true });
    try {
      outcome = keptOutcome(await call.outcome);
    } finally {
      request.signal.removeEventListener("abort", leave);
      leave();
    }
    call.delivered = true;
  } else {
    outcome = found.call.outcome;
    found.call.delivered = true;
  }
  return keptResponse(outcome);
}

/** The JSON answer of an outcome: the result, or the error it was answered with. */
function keptResponse(outcome: KeptOutcome): Response {
  if (outcome.kind === "result") return jsonResponse(outcome.result);
  return errorResponse(outcome.error.code, outcome.error.error, outcome.error);
}

/** The final event of an outcome. */
function lastEvent(outcome: KeptOutcome): StreamEvent {
  return outcome.kind === "result"
    ? { type: "exit", result: outcome.result }
    : { type: "error", error: outcome.error };
}

/**
 * The retained tail of one output from byte `from` on: the tail holds the stream's last bytes,
 * so what lies between `from` and the tail's start is reported as skipped.
 */
function tailFrom(
  stream: "stdout" | "stderr",
  result: ExecResult,
  from: number,
): StreamEvent | undefined {
  const text = result[stream];
  const bytes = encoder.encode(text);
  const total = result[`${stream}Bytes`] ?? bytes.byteLength;
  const tailStart = Math.max(0, total - bytes.byteLength);
  if (from >= total) return undefined;
  if (from <= tailStart) {
    const skipped = tailStart - from;
    return skipped > 0
      ? { type: stream, data: text, skippedBytes: skipped }
      : { type: stream, data: text };
  }
  return { type: stream, data: decoder.decode(bytes.subarray(from - tailStart)) };
}

/** The events of a kept outcome, replayed from `from`. */
function keptEvents(sandboxId: string, call: KeptCall, from: StreamOffsets): StreamEvent[] {
  call.delivered = true;
  const events: StreamEvent[] = [startEvent(sandboxId)];
  if (call.outcome.kind === "result") {
    for (const stream of ["stdout", "stderr"] as const) {
      const event = tailFrom(stream, call.outcome.result, from[stream]);
      if (event !== undefined) events.push(event);
    }
  }
  events.push(lastEvent(call.outcome));
  return events;
}

/**
 * A re-attached event stream: `start`, the replayed output from `from` (a running call's replay
 * log, a kept outcome's tails), then the live output, heartbeats and `exit` or `error`. An id
 * with no call streams an `error` event (`not_found`).
 */
function reattachStream(
  context: ReattachContext,
  sandboxId: string,
  found: FoundCall | undefined,
  from: StreamOffsets,
  request: Request,
): Response {
  if (found === undefined || found.kind === "expired") {
    const state = found === undefined ? "unknown" : "expired";
    return eventStreamOf([
      startEvent(sandboxId),
      {
        type: "error",
        error: { error: BRIDGE_TEXTS.notKept(sandboxId, state), code: "not_found" },
      },
    ]);
  }
  if (found.kind === "kept") return eventStreamOf(keptEvents(sandboxId, found.call, from));
  const call = found.call;
  const leave = call.attach();
  request.signal.addEventListener("abort", leave, { once: true });
  const pieces = livePieces(call, from, context.heartbeatIntervalMs);
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const next = await pieces.next();
          if (next.done) {
            call.delivered = true;
            leave();
            controller.close();
          } else {
            controller.enqueue(encoder.encode(next.value));
          }
        } catch (error) {
          leave();
          controller.error(error);
        }
      },
      cancel() {
        leave();
        void pieces.return(undefined);
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark: context.streamBufferBytes }),
  );
  return new Response(body, { headers: SSE_HEADERS });
}

function frameText(event: StreamEvent): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

/** Resolves after `ms` unless `cancelled` first (then never). */
function delay(ms: number): { done: Promise<"heartbeat">; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const done = new Promise<"heartbeat">((resolve) => {
    timer = setTimeout(() => resolve("heartbeat"), ms);
  });
  return { done, cancel: () => clearTimeout(timer) };
}

/** The frames of a live call's re-attached stream, as the reader pulls them. */
async function* livePieces(
  call: ExecCall,
  from: StreamOffsets,
  heartbeatIntervalMs: number,
): AsyncGenerator<string, void, undefined> {
  yield frameText(startEvent(call.sandboxId));
  const log = call.replay;
  if (log !== undefined) {
    let index = 0;
    for (;;) {
      while (index < log.entries.length) {
        const entry = log.entries[index++];
        if (entry === undefined) break;
        const data = entryFrom(entry, from[entry.stream]);
        if (data.length > 0) yield frameText({ type: entry.stream, data });
      }
      if (log.ended) break;
      const tick = delay(heartbeatIntervalMs);
      const woke = await Promise.race([log.changed().then(() => "changed" as const), tick.done]);
      tick.cancel();
      if (woke === "heartbeat") {
        yield frameText({ type: "heartbeat", elapsedMs: Date.now() - call.startedAt });
      }
    }
  }
  // The outcome is decided once the log ended; heartbeats while the sandbox is destroyed.
  for (;;) {
    const tick = delay(heartbeatIntervalMs);
    const outcome = await Promise.race([call.outcome, tick.done]);
    tick.cancel();
    if (outcome === "heartbeat") {
      yield frameText({ type: "heartbeat", elapsedMs: Date.now() - call.startedAt });
      continue;
    }
    yield* framePieces(lastEvent(keptOutcome(outcome)));
    return;
  }
}
