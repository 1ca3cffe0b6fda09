/**
 * Where each request goes and how it is retried: an exec call takes the first of the client's
 * bridges with room (waiting for room, first come first served) and remembers which bridge took
 * it until it ends; a health check or cancel goes to the bridge it names. Both go through the
 * one retry loop (`sendWithRetries`), which never sends again what may have run.
 */
import type { ExecRequest } from "@remote-task/protocol";
import type { Bridge, BridgePool } from "./bridges.js";
import type { BridgeCapabilities } from "./capabilities.js";
import type { CapacityError } from "./errors.js";
import { type Exchange, sendOnce } from "./exchange.js";
import { outOfPatience, sendWithRetries } from "./retry.js";
import type { CallScope } from "./scope.js";
import type { Transport, TransportResponse } from "./transport.js";

export class Dispatcher {
  readonly #pool: BridgePool;
  readonly #transport: Transport;
  readonly #capabilities: BridgeCapabilities;
  /** The bridge each exec call in flight was sent to, by sandbox id (where `cancel()` goes). */
  readonly #takenBy = new Map<string, Bridge>();

  constructor(pool: BridgePool, transport: Transport, capabilities: BridgeCapabilities) {
    this.#pool = pool;
    this.#transport = transport;
    this.#capabilities = capabilities;
  }

  /** The bridge that took the exec call `sandboxId`, while it is in flight. */
  bridgeOf(sandboxId: string): Bridge | undefined {
    return this.#takenBy.get(sandboxId);
  }

  /**
   * Sends one request, retrying what provably did not run; resolves with a 2xx response. A request
   * to a named bridge (health, cancel) retries within the retry budget. An exec goes to the first
   * bridge with room, and again wherever there is room after each refusal that proves it did not
   * run: a refusal for capacity (patient calls wait for room until the call's deadline; the pool
   * closes that bridge until a call of this client ends there or its `Retry-After` passes, so the
   * next try may be another bridge at once) or an unreachable bridge (within the retry budget).
   */
  send(scope: CallScope, exchange: Exchange): Promise<TransportResponse> {
    const named = exchange.to;
    if (named !== undefined) {
      return sendWithRetries({
        policy: exchange.retry,
        abort: scope,
        deadlineAt: scope.deadlineAt,
        patient: false,
        sleeps: true,
        target: () => named,
        attempt: (bridge) => sendOnce(this.#transport, scope, exchange, bridge),
        notRun: () => {},
      });
    }
    const policy = exchange.retry;
    const sandboxId = scope.sandboxId as string;
    const startedAt = Date.now();
    const waitUntil = scope.deadlineAt;
    return sendWithRetries({
      policy,
      abort: scope,
      deadlineAt: waitUntil,
      patient: policy.patient,
      sleeps: false,
      // A bridge with room is taken, checked and sent to without waiting a turn (the usual case).
      target: (number, refusals) => {
        const free = this.#pool.tryAcquire(number > 1);
        if (free !== undefined) return this.#take(sandboxId, free);
        return this.#waitForRoom(scope, refusals, startedAt, waitUntil).then((bridge) =>
          this.#take(sandboxId, bridge),
        );
      },
      attempt: (bridge, number) => {
        const send = () => {
          if (number > 1) scope.restartDeadline();
          return sendOnce(this.#transport, scope, exchange, bridge);
        };
        const checking = this.#capabilities.assertTakes(exchange.body as ExecRequest, bridge);
        return checking === undefined ? send() : checking.then(send);
      },
      notRun: (bridge, how) => {
        // Nothing runs: a new try (or the end of the call) sends no cancel.
        scope.unsent();
        this.#takenBy.delete(sandboxId);
        this.#pool.release(bridge, how);
      },
      onRefused: (refusals) => {
        exchange.onRefused?.();
        if (policy.patient && this.#pool.earliestOpening() >= waitUntil) {
          throw outOfPatience(scope, refusals, Date.now() - startedAt, true);
        }
      },
    });
  }

  /** The exec call `sandboxId` goes to `bridge` (where its cancel goes while it is in flight). */
  #take(sandboxId: string, bridge: Bridge): Bridge {
    this.#takenBy.set(sandboxId, bridge);
    return bridge;
  }

  /**
   * Waits (at the front of the line after a refusal) for a bridge with room, until the call's
   * first deadline, also once a try has restarted it; then the call fails with how long it waited.
   */
  async #waitForRoom(
    scope: CallScope,
    refusals: readonly CapacityError[],
    startedAt: number,
    waitUntil: number,
  ): Promise<Bridge> {
    const patience = () => outOfPatience(scope, refusals, Date.now() - startedAt);
    scope.waitForRoom(patience);
    const until = AbortSignal.timeout(Math.max(0, waitUntil - Date.now()));
    try {
      return await this.#pool.acquire(AbortSignal.any([scope.signal, until]), refusals.length > 0);
    } catch (error) {
      throw scope.reason ?? (until.aborted ? patience() : error);
    } finally {
      scope.stopWaiting();
    }
  }

  /** An exec call ended: the bridge that took it has a free slot again. */
  endCall(scope: CallScope): void {
    const sandboxId = scope.sandboxId;
    if (sandboxId === undefined || !scope.runsCommand) return;
    const bridge = this.#takenBy.get(sandboxId);
    if (bridge === undefined) return;
    this.#takenBy.delete(sandboxId);
    this.#pool.release(bridge, { kind: scope.wasAnswered ? "answered" : "ended" });
  }
}
