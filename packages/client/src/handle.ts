/**
 * A handle on a durable call, by its sandbox id: what `client.start()` returns for a detached
 * call and `client.attach(id)` gives from any process. Its state, its result (waiting for the
 * end), its events from any byte offset, and its cancel; none of them can run the command again.
 */
import type { StreamEvent } from "@remote-task/protocol";
import { BridgeError } from "./errors.js";
import {
  type Attachment,
  awaitResult,
  callStatus,
  type ReattachContext,
  reattachedEvents,
} from "./reattach.js";
import { toTaskResult } from "./result.js";
import { CallScope } from "./scope.js";
import type { CallHandle, CancelResult, HandleWaitOptions, TaskResult } from "./types.js";

/** What a handle needs of the client that made it. */
export interface HandleHost {
  context: ReattachContext;
  /** The bridge that has the call (found on first use when the client has several). */
  attachment(): Promise<Attachment>;
  cancel(sandboxId: string, signal: AbortSignal | undefined): Promise<CancelResult>;
  /** Seconds to wait for the call when the caller names none: its own timeout plus grace. */
  waitSeconds(timeoutSeconds: number | undefined): number;
  /** Bytes of the end of each output a result keeps. */
  keptBytes: number;
  assertOpen(): void;
}

/** The error of an id the bridge does not know, or whose outcome is no longer kept. */
function lostCall(sandboxId: string, state: string): BridgeError {
  return new BridgeError(
    `The bridge has no call ${sandboxId} (${state}): it was never sent there, its result expired, or the bridge restarted. The command may have run; it was not run again.`,
    { sandboxId, code: "not_found", mayHaveRun: true },
  );
}

export class DurableCallHandle implements CallHandle {
  readonly sandboxId: string;
  readonly #host: HandleHost;
  readonly #timeoutSeconds: number | undefined;

  constructor(host: HandleHost, sandboxId: string, timeoutSeconds: number | undefined) {
    this.#host = host;
    this.sandboxId = sandboxId;
    this.#timeoutSeconds = timeoutSeconds;
  }

  #scope(options: HandleWaitOptions, what: string): CallScope {
    const seconds = this.#host.waitSeconds(options.timeoutSeconds ?? this.#timeoutSeconds);
    return new CallScope({
      signal: options.signal,
      deadlineMs: seconds * 1000,
      sandboxId: this.sandboxId,
      what,
    });
  }

  async status(options: HandleWaitOptions & { waitSeconds?: number | undefined } = {}) {
    this.#host.assertOpen();
    const scope = this.#scope(options, "Asking for the call's state");
    try {
      return await callStatus(
        this.#host.context,
        scope,
        await this.#host.attachment(),
        options.waitSeconds ?? 0,
      );
    } finally {
      scope.dispose();
    }
  }

  async result(options: HandleWaitOptions = {}): Promise<TaskResult> {
    this.#host.assertOpen();
    const scope = this.#scope(options, "Waiting for the call's result");
    const started = performance.now();
    try {
      const attachment = await this.#host.attachment();
      const lost = lostCall(this.sandboxId, "unknown or expired");
      const result = await awaitResult(this.#host.context, scope, attachment, lost);
      return toTaskResult(
        result,
        this.sandboxId,
        performance.now() - started,
        this.#host.keptBytes,
      );
    } finally {
      scope.dispose();
    }
  }

  async *stream(
    options: HandleWaitOptions & {
      from?: { stdout?: number | undefined; stderr?: number | undefined } | undefined;
    } = {},
  ): AsyncGenerator<StreamEvent, void, undefined> {
    this.#host.assertOpen();
    const scope = this.#scope(options, "Following the call's events");
    try {
      const attachment = await this.#host.attachment();
      const position = { stdout: options.from?.stdout ?? 0, stderr: options.from?.stderr ?? 0 };
      const lost = lostCall(this.sandboxId, "unknown or expired");
      yield* reattachedEvents(this.#host.context, scope, attachment, position, lost);
    } finally {
      scope.dispose();
    }
  }

  cancel(options: { signal?: AbortSignal | undefined } = {}): Promise<CancelResult> {
    this.#host.assertOpen();
    return this.#host.cancel(this.sandboxId, options.signal);
  }
}
