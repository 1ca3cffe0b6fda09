/**
 * Re-attaching to a call by its sandbox id (durable calls, on a bridge whose `/health` reports
 * `durable`): its state (`GET /exec/{sandboxId}`, long-polled until it ends) and its events from
 * byte offsets (the same route as an event stream). A dropped connection on the way is tried
 * again until the call's deadline; nothing is ever sent that could run the command again.
 */
import {
  type CallStatus,
  callStatusSchema,
  type ExecResult,
  type StreamEvent,
} from "@remote-task/protocol";
import type { Bridge } from "./bridges.js";
import { NO_RETRY } from "./config.js";
import { errorFromBody, statusForCode } from "./error-mapping.js";
import { ConnectionError, ProtocolError, type RemoteTaskError, TimeoutError } from "./errors.js";
import { asFailure, type Exchange, errorContext, receiveJson, sendOnce } from "./exchange.js";
import { CallScope, sleep } from "./scope.js";
import type { Secrets } from "./secrets.js";
import { sseEvents } from "./sse.js";
import type { Transport } from "./transport.js";

/** Longest wait of one status request (the bridge caps it at 60 s; idle proxies cut earlier). */
const MAX_POLL_SECONDS = 50;
/** How often an `unknown` id is asked again (its request may still be on its way). */
const UNKNOWN_TRIES = 3;
const UNKNOWN_PAUSE_MS = 300;
/** Pauses between tries after a dropped connection: doubling from the first to the last. */
const FIRST_PAUSE_MS = 100;
const LAST_PAUSE_MS = 2_000;

/** What re-attaching needs of the client. */
export interface ReattachContext {
  transport: Transport;
  maxResponseBytes: number;
  idleTimeoutSeconds: number;
}

/** One call to re-attach to, at the bridge that has it. */
export interface Attachment {
  bridge: Bridge;
  sandboxId: string;
  secrets: Secrets;
}

/** A failure worth another try: the connection (or its answer) broke on the way. */
function transient(error: unknown): boolean {
  return ConnectionError.isInstance(error) || ProtocolError.isInstance(error);
}

function pause(failures: number): number {
  return Math.min(LAST_PAUSE_MS, FIRST_PAUSE_MS * 2 ** (failures - 1));
}

/** A `finished` status's outcome: its result, or its error thrown as the call's typed error. */
function outcomeOf(status: CallStatus, attachment: Attachment): ExecResult {
  if (status.result !== undefined) return status.result;
  const body = status.error ?? {
    error: "The bridge reported the call finished without its outcome.",
    code: "internal" as const,
  };
  throw errorFromBody(statusForCode(body.code), body, {
    ...errorContext(attachment.bridge, attachment.secrets, attachment.sandboxId, undefined),
    accepted: true,
  });
}

/** One status request, waiting up to `waitSeconds` for the call to end. */
export async function callStatus(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  waitSeconds: number,
): Promise<CallStatus> {
  const { bridge, sandboxId, secrets } = attachment;
  const scope = new CallScope({
    signal: parent.signal,
    deadlineMs: Math.max(1, parent.deadlineAt - Date.now()),
    sandboxId,
    what: "Asking for the call's state",
  });
  const exchange: Exchange = {
    method: "GET",
    path: `/exec/${encodeURIComponent(sandboxId)}?waitSeconds=${waitSeconds}`,
    accept: "application/json",
    retry: NO_RETRY,
    secrets,
    to: bridge,
  };
  try {
    const response = await sendOnce(context.transport, scope, exchange, bridge);
    return await receiveJson(scope, response, callStatusSchema, "a call status", {
      maxResponseBytes: context.maxResponseBytes,
      keptBytes: undefined,
    });
  } finally {
    scope.dispose();
  }
}

/**
 * Waits for the call's result by asking its state until it ends, within `parent`'s deadline.
 * A call the bridge does not know (after a few tries) or whose outcome expired ends with
 * `lost` (the error that made the caller re-attach): it may have run, and is not run again.
 */
export async function awaitResult(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  lost: RemoteTaskError,
): Promise<ExecResult> {
  let failures = 0;
  let unknown = 0;
  for (;;) {
    if (parent.reason) throw parent.reason;
    const left = Math.floor((parent.deadlineAt - Date.now()) / 1000) - 1;
    const waitSeconds = Math.max(0, Math.min(MAX_POLL_SECONDS, left));
    let status: CallStatus;
    try {
      status = await callStatus(context, parent, attachment, waitSeconds);
    } catch (error) {
      if (parent.reason) throw parent.reason;
      if (!transient(error) && !TimeoutError.isInstance(error)) throw error;
      failures++;
      await sleep(pause(failures), parent.signal);
      continue;
    }
    failures = 0;
    if (status.state === "finished") return outcomeOf(status, attachment);
    if (status.state === "unknown" && ++unknown < UNKNOWN_TRIES) {
      await sleep(UNKNOWN_PAUSE_MS, parent.signal);
      continue;
    }
    if (status.state === "unknown" || status.state === "expired") throw lost;
  }
}

/** Where a reader is in each output, in bytes (what it received plus what it was told it skipped). */
export interface StreamPosition {
  stdout: number;
  stderr: number;
}

/** Counts an output event into `position`. */
export function advance(position: StreamPosition, event: StreamEvent): void {
  if (event.type !== "stdout" && event.type !== "stderr") return;
  position[event.type] +=
    new TextEncoder().encode(event.data).byteLength + (event.skippedBytes ?? 0);
}

/**
 * The call's events from `position` on (`start` left out), re-attached as often as the
 * connection drops, until `exit` (or an `error` event, thrown as its typed error), within
 * `parent`'s deadline. `position` advances as events arrive.
 */
export async function* reattachedEvents(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  position: StreamPosition,
  lost: RemoteTaskError,
): AsyncGenerator<StreamEvent, void, undefined> {
  const { bridge, sandboxId, secrets } = attachment;
  let failures = 0;
  for (;;) {
    if (parent.reason) throw parent.reason;
    const scope = new CallScope({
      signal: parent.signal,
      deadlineMs: Math.max(1, parent.deadlineAt - Date.now()),
      sandboxId,
      what: "Re-attaching to the command's events",
    });
    const exchange: Exchange = {
      method: "GET",
      path: `/exec/${encodeURIComponent(sandboxId)}?stdoutFrom=${position.stdout}&stderrFrom=${position.stderr}`,
      accept: "text/event-stream",
      retry: NO_RETRY,
      secrets,
      to: bridge,
    };
    try {
      const response = await sendOnce(context.transport, scope, exchange, bridge);
      scope.watchIdle(context.idleTimeoutSeconds * 1000);
      const events = sseEvents(response.body, {
        signal: scope.signal,
        maxEventChars: context.maxResponseBytes,
        status: response.status,
        ...scope.facts,
      });
      for await (const event of events) {
        scope.touch();
        failures = 0;
        if (event.type === "start") continue;
        if (event.type === "error") {
          if (event.error.code === "not_found") throw lost;
          throw errorFromBody(statusForCode(event.error.code), event.error, {
            ...errorContext(bridge, secrets, sandboxId, undefined),
            accepted: true,
          });
        }
        advance(position, event);
        yield event;
        if (event.type === "exit") {
          response.discard();
          return;
        }
      }
      throw new ProtocolError("The re-attached stream ended without an exit event.", scope.facts);
    } catch (error) {
      if (parent.reason) throw parent.reason;
      const failure = asFailure(error, scope);
      if (!transient(failure) && !TimeoutError.isInstance(failure)) throw failure;
      failures++;
      await sleep(pause(failures), parent.signal);
    } finally {
      scope.dispose();
    }
  }
}
