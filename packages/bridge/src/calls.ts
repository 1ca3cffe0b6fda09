import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { Admission } from "@remote-task/protocol";
import type { SandboxBackend } from "./backend.js";
import { type CallHost, type CallSpec, destroySandbox, ExecCall } from "./call.js";
import type { AdmissionSettings } from "./limits.js";
import type { BridgeLogger } from "./logger.js";
import { HttpError } from "./responses.js";

/** `Retry-After` of a call refused because the bridge is at its admission limits. */
export const OVERLOAD_RETRY_AFTER_SECONDS = 1;

function shuttingDown(): HttpError {
  return new HttpError("capacity_exceeded", BRIDGE_TEXTS.shuttingDown, { retryAfterSeconds: 1 });
}

function overloaded({ maxConcurrent, maxQueued }: AdmissionSettings): HttpError {
  return new HttpError("capacity_exceeded", BRIDGE_TEXTS.overloaded(maxConcurrent, maxQueued), {
    retryAfterSeconds: OVERLOAD_RETRY_AFTER_SECONDS,
    status: 429,
  });
}

/**
 * The calls in flight, by sandbox id: which call may start (admission: a slot, a place in the
 * queue, or a refusal), which one a `/cancel` names, and what `shutdown()` waits for.
 */
export class CallRegistry implements CallHost {
  readonly #calls = new Map<string, ExecCall>();
  /** Calls holding a slot: their sandbox is starting, running or being destroyed. */
  readonly #running = new Set<ExecCall>();
  /** Calls waiting for a slot, oldest first. */
  readonly #waiting = new Set<ExecCall>();
  #closed = false;

  constructor(
    readonly backend: SandboxBackend,
    readonly logger: BridgeLogger,
    readonly token: string | undefined,
    readonly admission: AdmissionSettings,
  ) {}

  /** Calls in flight, waiting ones included. */
  get size(): number {
    return this.#calls.size;
  }

  /** The admission settings and the load now, as `/health` reports them. */
  load(): Admission {
    return { ...this.admission, running: this.#running.size, queued: this.#waiting.size };
  }

  /**
   * Throws the refusal `open` would give for want of a place, before the request is even read:
   * an overloaded bridge answers at once, and spends nothing on requests it cannot take.
   */
  assertRoom(): void {
    if (this.#closed) throw shuttingDown();
    const { maxConcurrent, maxQueued } = this.admission;
    if (this.#running.size >= maxConcurrent && this.#waiting.size >= maxQueued) {
      throw overloaded(this.admission);
    }
  }

  /**
   * Opens a call for `spec`: it starts at once when a slot is free, else waits in the queue
   * (its deadline already running). Throws the refusal: the bridge is shutting down (503
   * `capacity_exceeded`, retry elsewhere), the id belongs to a call in flight (409), or every
   * slot and every place in the queue is taken (429 `capacity_exceeded`; nothing ran).
   */
  open(spec: CallSpec): ExecCall {
    if (this.#closed) throw shuttingDown();
    if (this.#calls.has(spec.sandboxId)) {
      throw new HttpError("conflict", BRIDGE_TEXTS.conflict(spec.sandboxId));
    }
    const slotFree = this.#running.size < this.admission.maxConcurrent;
    if (!slotFree && this.#waiting.size >= this.admission.maxQueued) {
      throw overloaded(this.admission);
    }
    const call = new ExecCall(this, spec);
    this.#calls.set(spec.sandboxId, call);
    if (slotFree) {
      if (call.begin()) this.#running.add(call);
    } else {
      call.wait();
      this.#waiting.add(call);
    }
    return call;
  }

  released(call: ExecCall): void {
    if (this.#calls.get(call.sandboxId) === call) this.#calls.delete(call.sandboxId);
    if (this.#running.delete(call)) this.#admitWaiting();
    else this.#waiting.delete(call);
  }

  /** Starts waiting calls, oldest first, while slots are free; one that already ended is dropped. */
  #admitWaiting(): void {
    for (const call of this.#waiting) {
      if (this.#running.size >= this.admission.maxConcurrent) return;
      this.#waiting.delete(call);
      if (call.begin()) this.#running.add(call);
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
  }
}
