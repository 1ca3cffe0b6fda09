import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { SandboxBackend } from "./backend.js";
import { type CallHost, type CallSpec, destroySandbox, ExecCall } from "./call.js";
import type { BridgeLogger } from "./logger.js";
import { HttpError } from "./responses.js";

/**
 * The calls in flight, by sandbox id: which call may start (admission), which one a `/cancel`
 * names, and what `shutdown()` waits for.
 */
export class CallRegistry implements CallHost {
  readonly #calls = new Map<string, ExecCall>();
  #closed = false;

  constructor(
    readonly backend: SandboxBackend,
    readonly logger: BridgeLogger,
    readonly token: string | undefined,
  ) {}

  /** Calls whose sandbox is not yet destroyed. */
  get size(): number {
    return this.#calls.size;
  }

  /**
   * Starts a call for `spec`, or throws the refusal: the bridge is shutting down (503
   * `capacity_exceeded`, retry elsewhere), or the id belongs to a call in flight (409).
   */
  open(spec: CallSpec): ExecCall {
    if (this.#closed) {
      throw new HttpError("capacity_exceeded", BRIDGE_TEXTS.shuttingDown, {
        retryAfterSeconds: 1,
      });
    }
    if (this.#calls.has(spec.sandboxId)) {
      throw new HttpError("conflict", BRIDGE_TEXTS.conflict(spec.sandboxId));
    }
    const call = new ExecCall(this, spec);
    this.#calls.set(spec.sandboxId, call);
    return call;
  }

  released(call: ExecCall): void {
    if (this.#calls.get(call.sandboxId) === call) this.#calls.delete(call.sandboxId);
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
