import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { Admission, DurableReport } from "@remote-task/protocol";
import type { SandboxBackend } from "./backend.js";
import { mapBackendError } from "./backend-errors.js";
import {
  type CallHost,
  type CallOutcome,
  type CallSpec,
  destroySandbox,
  ExecCall,
} from "./call.js";
import type { KeptCalls, KeptLookup, KeptOutcome } from "./kept.js";
import { type AdmissionSettings, defaultQueuedPerClient, queuedCallBytes } from "./limits.js";
import type { BridgeLogger } from "./logger.js";
import { HttpError } from "./responses.js";

/** Bounds of the `Retry-After` of a call refused because the bridge is at its admission limits. */
const OVERLOAD_RETRY_AFTER_SECONDS = { min: 1, max: 60 } as const;
/** How long a call is taken to hold its slot before any call has ended (a short command's start, run and teardown). */
const ASSUMED_SLOT_MS = 1_000;
/** Weight of the newest call in the running mean of how long calls hold their slot. */
const SLOT_MEAN_WEIGHT = 0.1;

function shuttingDown(): HttpError {
  return new HttpError("capacity_exceeded", BRIDGE_TEXTS.shuttingDown, { retryAfterSeconds: 1 });
}

/**
 * The key of calls whose host named no client: one client for the free slots' round, with no
 * share of the queue of its own (the whole queue is its bound).
 */
const UNNAMED_CLIENT = "";

/** What a sandbox id names on this bridge: a call in flight, a kept outcome, or an expired one. */
export type FoundCall = { kind: "live"; call: ExecCall } | NonNullable<KeptLookup>;

/** An outcome as the table keeps it: a failure as the error body it is answered with. */
export function keptOutcome(outcome: CallOutcome): KeptOutcome {
  return outcome.kind === "result"
    ? outcome
    : { kind: "failed", error: mapBackendError(outcome.error).body };
}

function clientOf(call: { client?: string | undefined }): string {
  return call.client ?? UNNAMED_CLIENT;
}

/** Adds `delta` to `key`'s count, dropping a count that reaches zero. */
function count(counts: Map<string, number>, key: string, delta: number): void {
  const next = (counts.get(key) ?? 0) + delta;
  if (next > 0) counts.set(key, next);
  else counts.delete(key);
}

/**
 * The calls in flight, by sandbox id: which call may start (admission: a slot, a place in the
 * queue, or a refusal), which one a `/cancel` names, and what `shutdown()` waits for. A free slot
 * goes to the oldest waiting call of the client with the fewest calls running, so one client's
 * backlog delays another's calls by about one slot's time, not by the whole backlog; and one
 * client may hold at most `maxQueuedPerClient` of the queue.
 */
export class CallRegistry implements CallHost {
  readonly #calls = new Map<string, ExecCall>();
  /** Calls holding a slot (their sandbox is starting, running or being destroyed), with when they got it. */
  readonly #running = new Map<ExecCall, number>();
  /** Calls waiting for a slot, oldest first, with the bytes each holds (`queuedCallBytes`). */
  readonly #waiting = new Map<ExecCall, number>();
  #waitingBytes = 0;
  /** Calls running and waiting, by client. */
  readonly #runningByClient = new Map<string, number>();
  readonly #waitingByClient = new Map<string, number>();
  /** Requests whose body is being read (each a call to come), in all and by client. */
  #reading = 0;
  readonly #readingByClient = new Map<string, number>();
  /** Running mean of how long the calls that ended held their slot (assumed until one has). */
  #slotMs: number | undefined;
  #closed = false;

  constructor(
    readonly backend: SandboxBackend,
    readonly logger: BridgeLogger,
    readonly token: string | undefined,
    readonly admission: AdmissionSettings,
    /** The kept calls (durable calls); undefined on a bridge without them. */
    readonly kept?: KeptCalls | undefined,
  ) {}

  /** A call in flight, or what is kept of one, by sandbox id; undefined when unknown here. */
  lookup(sandboxId: string): FoundCall | undefined {
    const call = this.#calls.get(sandboxId);
    if (call !== undefined) return { kind: "live", call };
    return this.kept?.lookup(sandboxId);
  }

  /** What is kept and for how long, as `/health` reports it; undefined without durable calls. */
  durableReport(): DurableReport | undefined {
    const kept = this.kept;
    if (kept === undefined) return undefined;
    kept.sweep();
    const { keptSeconds, maxKept, maxKeptBytes, disconnectGraceSeconds } = kept.settings;
    return {
      keptSeconds,
      maxKept,
      maxKeptBytes,
      kept: kept.count,
      keptBytes: kept.bytes,
      disconnectGraceSeconds,
      replay: "head",
    };
  }

  /** Calls in flight, waiting ones included. */
  get size(): number {
    return this.#calls.size;
  }

  /** The admission settings and the load now, as `/health` reports them. */
  load(): Admission {
    const { maxConcurrent, maxQueued } = this.admission;
    return { maxConcurrent, maxQueued, running: this.#running.size, queued: this.#waiting.size };
  }

  /** Bytes the waiting calls hold now, as the queue counts them. */
  get queuedBytes(): number {
    return this.#waitingBytes;
  }

  /**
   * Seconds until the calls waiting now have all reached a slot: as many rounds of the slots as
   * they fill, each as long as calls recently held their slot; whole seconds within
   * {@link OVERLOAD_RETRY_AFTER_SECONDS}. The `Retry-After` of a refusal for want of room.
   */
  retryAfterSeconds(): number {
    const rounds = Math.max(1, this.#waiting.size) / this.admission.maxConcurrent;
    const seconds = Math.ceil((rounds * (this.#slotMs ?? ASSUMED_SLOT_MS)) / 1000);
    const { min, max } = OVERLOAD_RETRY_AFTER_SECONDS;
    return Math.min(max, Math.max(min, seconds));
  }

  #overloaded(): HttpError {
    const { maxConcurrent, maxQueued, maxQueuedBytes } = this.admission;
    const retryAfterSeconds = this.retryAfterSeconds();
    return new HttpError(
      "capacity_exceeded",
      BRIDGE_TEXTS.overloaded(maxConcurrent, maxQueued, maxQueuedBytes, retryAfterSeconds),
      { retryAfterSeconds, status: 429 },
    );
  }

  /**
   * Ms a new call of `client` would wait for a slot, undefined before any call has ended (no
   * measure yet): the calls that would go ahead of it (its client's own waiting calls, and of
   * every other client as many as one more than that, as the free slots go round the clients)
   * reach their slots in rounds of `maxConcurrent`, each as long as calls recently held theirs.
   */
  #expectedWaitMs(client: string): number | undefined {
    if (this.#slotMs === undefined) return undefined;
    const own = this.#waitingByClient.get(client) ?? 0;
    let ahead = own;
    for (const [other, waiting] of this.#waitingByClient) {
      if (other !== client) ahead += Math.min(waiting, own + 1);
    }
    return ((ahead + 1) / this.admission.maxConcurrent) * this.#slotMs;
  }

  /** Whether a call holding `bytes` would find no slot and no room in the queue. */
  #full(bytes: number): boolean {
    const { maxConcurrent, maxQueued, maxQueuedBytes } = this.admission;
    return (
      this.#running.size >= maxConcurrent &&
      (this.#waiting.size >= maxQueued || this.#waitingBytes + bytes > maxQueuedBytes)
    );
  }

  /**
   * Throws the refusal `open` would give for want of a place, before the request is even read
   * (counting it as holding nothing yet): an overloaded bridge answers at once, and spends
   * nothing on requests it cannot take. Requests whose bodies are being read count as calls
   * already (a slow upload holds a place like a waiting call, within its client's share too);
   * the place is held until `release` is called, just before `open`.
   */
  reserve(client?: string | undefined): { release(): void } {
    if (this.#closed) throw shuttingDown();
    const { maxConcurrent, maxQueued } = this.admission;
    const calls = this.#running.size + this.#waiting.size + this.#reading;
    if (this.#full(0) || calls >= maxConcurrent + maxQueued) throw this.#overloaded();
    const key = client ?? UNNAMED_CLIENT;
    const held = (this.#waitingByClient.get(key) ?? 0) + (this.#readingByClient.get(key) ?? 0);
    // Bodies being read may take the free slots rather than wait: those do not count.
    const free = Math.max(0, maxConcurrent - this.#running.size);
    if (key !== UNNAMED_CLIENT && held >= this.#clientShare() + free) {
      const retryAfterSeconds = this.retryAfterSeconds();
      throw new HttpError(
        "capacity_exceeded",
        BRIDGE_TEXTS.clientQueueFull(held, retryAfterSeconds),
        { retryAfterSeconds, status: 429 },
      );
    }
    this.#reading++;
    count(this.#readingByClient, key, 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#reading--;
        count(this.#readingByClient, key, -1);
      },
    };
  }

  #clientShare(): number {
    return this.admission.maxQueuedPerClient ?? defaultQueuedPerClient(this.admission.maxQueued);
  }

  /**
   * Opens a call for `spec`: it starts at once when a slot is free, else waits in the queue
   * (its deadline already running). Throws the refusal: the bridge is shutting down (503
   * `capacity_exceeded`, retry elsewhere), the id belongs to a call in flight (409), or every
   * slot is taken and the queue has no room for it (by count, by bytes, or by its client's
   * share), or it would wait past its deadline (429 `capacity_exceeded` with `Retry-After`;
   * nothing ran).
   */
  open(spec: CallSpec): ExecCall {
    if (this.#closed) throw shuttingDown();
    if (this.#calls.has(spec.sandboxId)) {
      throw new HttpError("conflict", BRIDGE_TEXTS.conflict(spec.sandboxId));
    }
    // Only a call that will wait is counted (and its request measured).
    const slotFree = this.#running.size < this.admission.maxConcurrent;
    const bytes = slotFree ? 0 : queuedCallBytes(spec);
    if (this.#full(bytes)) throw this.#overloaded();
    const client = clientOf(spec);
    if (!slotFree) this.#assertWaitable(client, spec.timeoutMs);
    if (spec.detach === true) {
      if (this.kept === undefined) throw new TypeError("detach needs durable calls");
      this.kept.reserve(spec.sandboxId, spec.command, spec.cap);
    }
    const call = new ExecCall(this, spec);
    this.#calls.set(spec.sandboxId, call);
    if (slotFree) {
      this.#begin(call);
    } else {
      call.wait();
      this.#waiting.set(call, bytes);
      this.#waitingBytes += bytes;
      count(this.#waitingByClient, client, 1);
    }
    return call;
  }

  /** Throws the refusal of a call of `client` that would exceed its share or miss its deadline. */
  #assertWaitable(client: string, timeoutMs: number): void {
    const waiting = this.#waitingByClient.get(client) ?? 0;
    const retryAfterSeconds = this.retryAfterSeconds();
    if (client !== UNNAMED_CLIENT && waiting >= this.#clientShare()) {
      throw new HttpError(
        "capacity_exceeded",
        BRIDGE_TEXTS.clientQueueFull(waiting, retryAfterSeconds),
        { retryAfterSeconds, status: 429 },
      );
    }
    const waitMs = this.#expectedWaitMs(client);
    if (waitMs !== undefined && waitMs > timeoutMs) {
      throw new HttpError(
        "capacity_exceeded",
        BRIDGE_TEXTS.wouldMissDeadline(
          Math.ceil(waitMs / 1000),
          Math.round(timeoutMs / 100) / 10,
          retryAfterSeconds,
        ),
        { retryAfterSeconds, status: 429 },
      );
    }
  }

  #begin(call: ExecCall): void {
    if (!call.begin()) return;
    this.#running.set(call, Date.now());
    count(this.#runningByClient, call.client, 1);
  }

  released(call: ExecCall): void {
    if (this.#calls.get(call.sandboxId) === call) this.#calls.delete(call.sandboxId);
    const outcome = call.settledOutcome;
    if (this.kept !== undefined && outcome !== undefined) {
      const delivered = call.delivered || (!call.detached && call.hasReaders);
      this.kept.keep(call.sandboxId, call.command, keptOutcome(outcome), delivered);
    }
    const since = this.#running.get(call);
    if (since !== undefined) {
      this.#running.delete(call);
      count(this.#runningByClient, call.client, -1);
      const held = Date.now() - since;
      this.#slotMs =
        this.#slotMs === undefined ? held : this.#slotMs + (held - this.#slotMs) * SLOT_MEAN_WEIGHT;
      this.#admitWaiting();
    } else {
      this.#leaveQueue(call);
    }
  }

  #leaveQueue(call: ExecCall): void {
    const bytes = this.#waiting.get(call);
    if (bytes === undefined) return;
    this.#waiting.delete(call);
    this.#waitingBytes -= bytes;
    count(this.#waitingByClient, call.client, -1);
  }

  /**
   * Starts waiting calls while slots are free: each time the oldest of the client with the fewest
   * calls running. One that already ended is dropped.
   */
  #admitWaiting(): void {
    while (this.#running.size < this.admission.maxConcurrent) {
      let next: ExecCall | undefined;
      let fewest = Number.POSITIVE_INFINITY;
      for (const call of this.#waiting.keys()) {
        const running = this.#runningByClient.get(call.client) ?? 0;
        if (running < fewest) {
          next = call;
          fewest = running;
          if (running === 0) break;
        }
      }
      if (next === undefined) return;
      this.#leaveQueue(next);
      this.#begin(next);
    }
  }

  /**
   * Ends the call running in `sandboxId` and waits until its sandbox is destroyed; with no such
   * call here, destroys the sandbox anyway (it may run elsewhere). True when a call was ended.
   */
  async cancel(sandboxId: string): Promise<boolean> {
    const call = this.#calls.get(sandboxId);
    if (call === undefined) {
      await destroySandbox(this, sandboxId);
      return false;
    }
    const cancelled = call.end("cancel");
    await call.cleaned;
    return cancelled;
  }

  /** Refuses new calls, ends every call in flight, and resolves once their sandboxes are gone. */
  async shutdown(): Promise<void> {
    this.#closed = true;
    while (this.#calls.size > 0) {
      const calls = [...this.#calls.values()];
      for (const call of calls) call.end("shutdown");
      await Promise.allSettled(calls.map((call) => call.cleaned));
    }
    this.kept?.close();
  }
}
