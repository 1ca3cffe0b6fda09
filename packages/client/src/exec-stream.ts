/**
 * A streamed exec call: its validated events, ending right after `exit`; an `error` event is
 * thrown as its typed error; the caller's `onOutput` sees each output chunk. A bridge without
 * streaming (the reference one) answers JSON, which is replayed as events.
 */
import { execResultSchema, type StreamEvent } from "@remote-task/protocol";
import type { Bridge } from "./bridges.js";
import type { PreparedCall } from "./call-options.js";
import type { ResolvedConfig } from "./config.js";
import type { Dispatcher } from "./dispatch.js";
import { errorFromBody, statusForCode } from "./error-mapping.js";
import { AbortError, ProtocolError, type RemoteTaskError } from "./errors.js";
import { asFailure, type Exchange, errorContext, receiveJson, settleFailure } from "./exchange.js";
import {
  type Attachment,
  advance,
  NeverReached,
  type ReattachContext,
  reattachedEvents,
  resentFailure,
} from "./reattach.js";
import type { CallScope } from "./scope.js";
import { sseEvents } from "./sse.js";
import type { RunOptions } from "./types.js";

/** An exception thrown by the caller's own `onOutput`, passed through unchanged. */
class CallbackFailure {
  constructor(readonly error: unknown) {}
}

/** What a streamed call needs of the client. */
export interface StreamContext {
  config: ResolvedConfig;
  dispatch: Dispatcher;
  /** The bridge an error event is explained with when the call's own is no longer known. */
  firstBridge: Bridge;
  /**
   * Where to re-attach to the call after `error` dropped its connection (the command may be
   * running), if its bridge re-attaches; `sentAt` (`performance.now()` before the request was
   * sent) when nothing of its answer arrived, so the bridge may prove it never got it.
   */
  reattach?:
    | ((
        error: unknown,
        scope: CallScope,
        sentAt: number | undefined,
      ) => Promise<{ context: ReattachContext; attachment: Attachment } | undefined>)
    | undefined;
}

/**
 * The validated events of a streamed exec; ends right after `exit`, throws the typed error of
 * an `error` event. Ending the iteration early aborts the call and cancels the command.
 */
export async function* execEvents(
  context: StreamContext,
  call: PreparedCall,
  scope: CallScope,
  exchange: Exchange,
  onOutput: RunOptions["onOutput"],
): AsyncGenerator<StreamEvent, void, undefined> {
  const { config, dispatch } = context;
  const { sandboxId } = call;
  let finished = false;
  /** Bytes of each output received (or reported skipped): where a re-attach resumes. */
  const position = { stdout: 0, stderr: 0 };
  const deliver = (event: StreamEvent) => {
    if (onOutput === undefined || (event.type !== "stdout" && event.type !== "stderr")) return;
    try {
      onOutput(
        event.skippedBytes === undefined
          ? { stream: event.type, data: event.data }
          : { stream: event.type, data: event.data, skippedBytes: event.skippedBytes },
      );
    } catch (error) {
      throw new CallbackFailure(error);
    }
  };
  /** The request sent: the call's own, or the same again to the bridge that never got it. */
  let sending = exchange;
  /** The failure that made the call re-attach, once its request is sent again. */
  let resent: RemoteTaskError | undefined;
  try {
    for (;;) {
      /** Something of the answer arrived: the bridge had the request. */
      let received = false;
      const sentAt = performance.now();
      try {
        const response = await dispatch.send(scope, sending);
        received = true;
        const contentType = response.header("content-type");
        if (!/^\s*text\/event-stream/i.test(contentType ?? "")) {
          const result = await receiveJson(scope, response, execResultSchema, "an exec result", {
            maxResponseBytes: config.maxResponseBytes,
            keptBytes: exchange.keptBytes,
          });
          const replay: StreamEvent[] = [];
          if (result.stdout) replay.push({ type: "stdout", data: result.stdout });
          if (result.stderr) replay.push({ type: "stderr", data: result.stderr });
          replay.push({ type: "exit", result });
          for (const event of replay) {
            deliver(event);
            if (event.type === "exit") finished = true;
            yield event;
          }
          return;
        }
        scope.watchIdle(config.idleTimeoutSeconds * 1000);
        const events = sseEvents(response.body, {
          signal: scope.signal,
          maxEventChars: config.maxResponseBytes,
          status: response.status,
          ...scope.facts,
        });
        for await (const event of events) {
          scope.touch();
          if (event.type === "start" && event.sandboxId !== sandboxId) {
            throw new ProtocolError(
              "The bridge started a different sandbox id than the one requested.",
              { status: response.status, ...scope.facts },
            );
          }
          if (event.type === "error") {
            scope.settled();
            const bridge = dispatch.bridgeOf(sandboxId) ?? context.firstBridge;
            throw errorFromBody(statusForCode(event.error.code), event.error, {
              ...errorContext(bridge, call.secrets, sandboxId, undefined, call.stdinBytes),
              accepted: true,
            });
          }
          if (event.type === "exit") {
            scope.settled();
            finished = true;
            response.discard();
          }
          advance(position, event);
          deliver(event);
          yield event;
          if (finished) return;
        }
        throw new ProtocolError(
          "The bridge's stream ended without an exit event; the command's outcome is unknown.",
          { status: response.status, ...scope.facts },
        );
      } catch (error) {
        if (error instanceof CallbackFailure) {
          scope.abort(new AbortError("onOutput threw; the call was aborted.", scope.facts));
          throw error.error;
        }
        const lost = asFailure(resentFailure(error, resent), scope);
        // Sent again and refused as a conflict: the call exists after all, and may have run.
        if (lost === resent) throw settleFailure(lost, scope);
        const again = await context.reattach?.(lost, scope, received ? undefined : sentAt);
        if (again === undefined) throw settleFailure(lost, scope);
        // The connection dropped with the command running: the rest of its events, re-attached.
        try {
          for await (const event of reattachedEvents(
            again.context,
            scope,
            again.attachment,
            position,
            lost,
          )) {
            if (event.type === "exit") {
              scope.settled();
              finished = true;
            }
            deliver(event);
            yield event;
            if (finished) return;
          }
        } catch (failure) {
          if (failure instanceof CallbackFailure) {
            scope.abort(new AbortError("onOutput threw; the call was aborted.", scope.facts));
            throw failure.error;
          }
          if (!(failure instanceof NeverReached)) throw settleFailure(failure, scope);
          // Nothing of it ran: the same request, to the bridge that had it.
          resent = lost;
          sending = { ...exchange, to: again.attachment.bridge };
        }
      }
    }
  } finally {
    // Reached without an error when the consumer stops iterating early.
    if (!finished) {
      scope.abort(new AbortError("The stream was closed before the command ended.", scope.facts));
    }
    scope.dispose();
    dispatch.endCall(scope);
  }
}
