/**
 * The bridges a client sends commands to, in the order it prefers them, and how many calls each
 * may be sent now. A call takes a bridge with room (`acquire`) and gives it back when it ends
 * (`release`). What a bridge can take is learnt from its refusals, AIMD-style: a refusal for
 * capacity lowers its limit to the calls it had accepted from this client (at least 1) and closes
 * it until one of them ends or its `Retry-After` has passed; each call it answers raises the limit
 * by 1/limit. Calls waiting for room are served first come, first served (a refused call goes
 * back to the front), so a burst waits its turn in the client instead of hammering a full bridge.
 */

/** One bridge as configured: where it is and its token. */
export interface BridgeTarget {
  /** Base URL without a trailing slash; routes are appended to it. */
  baseUrl: string;
  token: string | undefined;
  /** Where the token came from (or where to set one), named by authentication errors. */
  tokenSource: string;
}

/** A bridge and what this client knows of its load. */
export class Bridge {
  /** Calls of this client sent to the bridge and not yet ended. */
  inFlight = 0;
  /** Most calls to send at once; unknown (infinite) until the bridge refuses one. */
  limit = Number.POSITIVE_INFINITY;
  /** No call is sent before this time (`Date.now()`), after a refusal or an unreachable bridge. */
  closedUntil = 0;

  /** The URLs of its fixed routes (`/exec`, `/health`, `/cancel`), joined once. */
  readonly #urls = new Map<string, string>();

  constructor(readonly target: BridgeTarget) {}

  /** The URL of `path` at this bridge (a path with a query is joined each time). */
  url(path: string): string {
    let url = this.#urls.get(path);
    if (url === undefined) {
      url = `${this.target.baseUrl}${path}`;
      if (!path.includes("?")) this.#urls.set(path, url);
    }
    return url;
  }

  hasRoom(now: number): boolean {
    return now >= this.closedUntil && this.inFlight < Math.max(1, Math.floor(this.limit));
  }
}

/** How a call sent to a bridge ended, for what the pool learns from it. */
export type Release =
  /** The bridge answered (a result, or an error other than a refusal): a slot is free again. */
  | { kind: "answered" }
  /** The bridge refused the call for capacity; try it again after `delayMs` at the latest. */
  | { kind: "refused"; delayMs: number }
  /** The bridge was not reached (connection refused); not before `delayMs`. */
  | { kind: "unreachable"; delayMs: number }
  /** The call ended otherwise (aborted, timed out, broken): nothing is learnt. */
  | { kind: "ended" };

interface Waiter {
  resolve(bridge: Bridge): void;
}

/** A client's bridges and the calls waiting for room on them (see the top of this file). */
export class BridgePool {
  readonly bridges: readonly Bridge[];
  readonly #waiting: Waiter[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = 0;

  constructor(targets: readonly BridgeTarget[]) {
    this.bridges = targets.map((target) => new Bridge(target));
  }

  /** The first bridge, the one `health()` asks. */
  get first(): Bridge {
    return this.bridges[0] as Bridge;
  }

  /**
   * A bridge with room, the first in the client's order; waits (first come, first served, or at
   * the front with `front`) until one has room. Rejects with `signal`'s reason when it aborts.
   */
  acquire(signal: AbortSignal, front = false): Promise<Bridge> {
    if (signal.aborted) return Promise.reject(signal.reason);
    const free = this.tryAcquire(front);
    if (free !== undefined) return Promise.resolve(free);
    return new Promise<Bridge>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: (bridge) => {
          signal.removeEventListener("abort", onAbort);
          resolve(bridge);
        },
      };
      const onAbort = () => {
        const at = this.#waiting.indexOf(waiter);
        if (at >= 0) this.#waiting.splice(at, 1);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      if (front) this.#waiting.unshift(waiter);
      else this.#waiting.push(waiter);
      this.#wake();
    });
  }

  /** A bridge with room taken at once, when one has room and no call waits before this one. */
  tryAcquire(front = false): Bridge | undefined {
    if (this.#waiting.length > 0 && !front) return undefined;
    const bridge = this.#withRoom(Date.now());
    return bridge === undefined ? undefined : this.#take(bridge);
  }

  /** A call sent to `bridge` ended as `how` (see {@link Release}). */
  release(bridge: Bridge, how: Release): void {
    bridge.inFlight--;
    const now = Date.now();
    if (how.kind === "answered") {
      bridge.closedUntil = 0;
      if (Number.isFinite(bridge.limit)) bridge.limit += 1 / bridge.limit;
    } else if (how.kind === "refused") {
      bridge.limit = Math.max(1, Math.min(bridge.limit, bridge.inFlight));
      bridge.closedUntil = Math.max(bridge.closedUntil, now + how.delayMs);
    } else if (how.kind === "unreachable") {
      bridge.closedUntil = Math.max(bridge.closedUntil, now + how.delayMs);
    }
    this.#wake();
  }

  /**
   * The earliest time (`Date.now()`) a bridge may have room for this client: now for one with a
   * call of this client in flight (its end frees a slot), else when it opens again.
   */
  earliestOpening(): number {
    const now = Date.now();
    return Math.min(
      ...this.bridges.map((bridge) =>
        bridge.inFlight > 0 ? now : Math.max(now, bridge.closedUntil),
      ),
    );
  }

  #take(bridge: Bridge): Bridge {
    bridge.inFlight++;
    return bridge;
  }

  #withRoom(now: number): Bridge | undefined {
    return this.bridges.find((bridge) => bridge.hasRoom(now));
  }

  /** Hands free room to the waiting calls in order; sets a timer for the next bridge to open. */
  #wake(): void {
    const now = Date.now();
    while (this.#waiting.length > 0) {
      const bridge = this.#withRoom(now);
      if (bridge === undefined) break;
      (this.#waiting.shift() as Waiter).resolve(this.#take(bridge));
    }
    if (this.#waiting.length === 0) return;
    const opening = this.bridges
      .filter((bridge) => bridge.closedUntil > now && bridge.inFlight < Math.max(1, bridge.limit))
      .map((bridge) => bridge.closedUntil);
    if (opening.length === 0) return;
    const at = Math.min(...opening);
    if (this.#timer !== undefined && this.#timerAt <= at) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#wake();
    }, at - now);
    // A timer must not keep a process alive for calls that were all abandoned.
    (this.#timer as { unref?: () => void }).unref?.();
  }
}
