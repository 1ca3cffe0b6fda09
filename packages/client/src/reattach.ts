/**
 * Re-attaching to a call by its sandbox id (durable calls, on a bridge whose `/health` reports
 * `durable`): its state (`GET /exec/{sandboxId}`, long-polled until it ends) and its events from
 * byte offsets (the same route as an event stream). A dropped connection on the way is tried
 * again until the call's deadline; nothing is ever sent that could run the command again. An
 * id the bridge does not know, from an instance that knows every id sent to it since before the
 * call's request left (`rememberedSeconds`), is a request that never reached it: `NeverReached`
 * tells the caller to send that request again (a repeated one attaches; nothing runs twice).
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
import { ConnectionError, ProtocolError, RemoteTaskError, TimeoutError } from "./errors.js";
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
  /**
   * `performance.now()` just before the call's own request was sent, when nothing of its answer
   * arrived; undefined when the request is not this client's to send again (a handle).
   */
  sentAt?: number | undefined;
}

/**
 * Thrown (not an error) when the bridge proves the call's request never reached it: no command
 * of it ran there, and the same request may be sent again.
 */
export class NeverReached {
  constructor(readonly status: CallStatus) {}
}

/**
 * What a request sent again after `NeverReached` fails with: a 409 `conflict` says the id's call
 * exists after all (its first request arrived late, and its outcome is gone), so the call ends
 * as `lost`, one that may have run; any other failure is its own.
 */
export function resentFailure(error: unknown, lost: RemoteTaskError | undefined): unknown {
  if (lost === undefined || !RemoteTaskError.isInstance(error)) return error;
  return error.code === "conflict" ? lost : error;
}

/**
 * Whether `status` proves the request sent at `attachment.sentAt` never reached the bridge: the
 * id is unknown to an instance that knows every id sent to it for longer than the request's
 * age (counted from before it was sent to now, after the status arrived).
 */
function neverReached(status: CallStatus, attachment: Attachment): boolean {
  const { sentAt } = attachment;
  if (status.state !== "unknown" || status.rememberedSeconds === undefined) return false;
  if (sentAt === undefined) return false;
  return (performance.now() - sentAt) / 1000 < status.rememberedSeconds;
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

/**
 * A request about the attached call (`GET /exec/{sandboxId}?query`), in a scope of its own that
 * ends with `parent`'s deadline; sent once (the caller decides what to try again).
 */
function attachedRequest(
  parent: CallScope,
  attachment: Attachment,
  query: string,
  accept: string,
  what: string,
): { scope: CallScope; exchange: Exchange } {
  const { bridge, sandboxId, secrets } = attachment;
  const scope = new CallScope({
    signal: parent.signal,
    deadlineMs: Math.max(1, parent.deadlineAt - Date.now()),
    sandboxId,
    what,
  });
  const exchange: Exchange = {
    method: "GET",
    path: `/exec/${encodeURIComponent(sandboxId)}?${query}`,
    accept,
    retry: NO_RETRY,
    secrets,
    to: bridge,
  };
  return { scope, exchange };
}

/** One status request, waiting up to `waitSeconds` for the call to end. */
export async function callStatus(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  waitSeconds: number,
): Promise<CallStatus> {
  const { scope, exchange } = attachedRequest(
    parent,
    attachment,
    `waitSeconds=${waitSeconds}`,
    "application/json",
    "Asking for the call's state",
  );
  try {
    const response = await sendOnce(context.transport, scope, exchange, attachment.bridge);
    return await receiveJson(scope, response, callStatusSchema, "a call status", {
      maxResponseBytes: context.maxResponseBytes,
      keptBytes: undefined,
    });
  } finally {
    scope.dispose();
  }
}

/**
 * Asks the call's state until `enough` says so (long polls of up to `MAX_POLL_SECONDS` when
 * `wait`), within `parent`'s deadline; a dropped connection is asked again. A call the bridge
 * does not know (after a few tries) or whose outcome expired ends with `lost` (the error that
 * made the caller re-attach): it may have run, and is not run again; one the bridge proves never
 * reached it throws `NeverReached`.
 */
async function followCall(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  lost: RemoteTaskError,
  enough: (status: CallStatus) => boolean,
  wait: boolean,
): Promise<CallStatus> {
  let failures = 0;
  let unknown = 0;
  for (;;) {
    if (parent.reason) throw parent.reason;
    const left = Math.floor((parent.deadlineAt - Date.now()) / 1000) - 1;
    const waitSeconds = wait ? Math.max(0, Math.min(MAX_POLL_SECONDS, left)) : 0;
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
    if (enough(status)) return status;
    if (neverReached(status, attachment)) throw new NeverReached(status);
    if (status.state === "unknown" && ++unknown < UNKNOWN_TRIES) {
      await sleep(UNKNOWN_PAUSE_MS, parent.signal);
      continue;
    }
    if (status.state === "unknown" || status.state === "expired") throw lost;
  }
}

/**
 * Waits for the call's result by asking its state until it ends (see `followCall`: `lost`, or
 * `NeverReached`, when the bridge does not have it).
 */
export async function awaitResult(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  lost: RemoteTaskError,
): Promise<ExecResult> {
  const finished = (status: CallStatus) => status.state === "finished";
  const status = await followCall(context, parent, attachment, lost, finished, true);
  return outcomeOf(status, attachment);
}

/**
 * Whether the bridge has the detached call whose answer was lost (queued, running or finished):
 * resolves when it does (see `followCall`: `lost`, or `NeverReached`, when it does not).
 */
export async function awaitTaken(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  lost: RemoteTaskError,
): Promise<void> {
  const taken = (status: CallStatus) => status.state !== "unknown" && status.state !== "expired";
  await followCall(context, parent, attachment, lost, taken, false);
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
 * `parent`'s deadline. `position` advances as events arrive. An id the bridge does not have
 * ends with `lost`, or with `NeverReached` when its status proves the request never reached it.
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
    const { scope, exchange } = attachedRequest(
      parent,
      attachment,
      `stdoutFrom=${position.stdout}&stderrFrom=${position.stderr}`,
      "text/event-stream",
      "Re-attaching to the command's events",
    );
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
          if (event.error.code === "not_found") {
            response.discard();
            throw await notFound(context, parent, attachment, lost);
          }
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
      // The call's end as the bridge told it, not a dropped connection: never tried again.
      if (error === lost || error instanceof NeverReached) throw error;
      const failure = asFailure(error, scope);
      if (!transient(failure) && !TimeoutError.isInstance(failure)) throw failure;
      failures++;
      await sleep(pause(failures), parent.signal);
    } finally {
      scope.dispose();
    }
  }
}

/**
 * What a re-attached stream's `not_found` means: `NeverReached` when the id's status proves the
 * request never reached the bridge (asked once, only for a request this client may send again),
 * otherwise `lost`.
 */
async function notFound(
  context: ReattachContext,
  parent: CallScope,
  attachment: Attachment,
  lost: RemoteTaskError,
): Promise<NeverReached | RemoteTaskError> {
  if (attachment.sentAt === undefined) return lost;
  const status = await callStatus(context, parent, attachment, 0).catch(() => undefined);
  return status !== undefined && neverReached(status, attachment) ? new NeverReached(status) : lost;
}
