/**
 * Cancelling a command: `cancel()` asks the bridge that took the call (or every bridge, when it
 * is not in flight here), and a call that ends early while its command may run sends a
 * best-effort cancel in the background, which `close()` waits for.
 */
import { type CancelResponse, isSandboxId } from "@remote-task/protocol";
import type { Bridge } from "./bridges.js";
import { NO_RETRY, type RetryPolicy } from "./config.js";
import { InvalidRequestError } from "./errors.js";
import type { CancelResult } from "./types.js";

/** Deadline of the best-effort cancel sent after an abort, timeout or broken call. */
const BACKGROUND_CANCEL_MS = 5_000;

/** Sends one `POST /cancel` to a bridge (within `deadlineMs` when given). */
export type PostCancel = (
  bridge: Bridge,
  sandboxId: string,
  signal: AbortSignal | undefined,
  retry: RetryPolicy,
  deadlineMs?: number,
) => Promise<CancelResponse>;

/**
 * True for the answer of a bridge that has no such route (404, or 405 for another method): the
 * reference bridge has no `/cancel`, which is no failure of the cancel itself.
 */
function isMissingRoute(error: unknown): boolean {
  return InvalidRequestError.isInstance(error) && (error.status === 404 || error.status === 405);
}

/** The client's cancels: asked for, and sent in the background. */
export class Cancels {
  readonly #post: PostCancel;
  readonly #background = new Set<Promise<void>>();
  #closed = false;

  constructor(post: PostCancel) {
    this.#post = post;
  }

  /**
   * Asks the bridges `to(sandboxId)` gives to cancel `givenId` (an invalid id is refused before
   * sending); the command is cancelled if any of them cancelled it, and a failure is thrown only
   * when none did.
   */
  async cancel(
    givenId: string,
    to: (sandboxId: string) => readonly Bridge[],
    signal: AbortSignal | undefined,
    retry: RetryPolicy,
  ): Promise<CancelResult> {
    const sandboxId = typeof givenId === "string" ? givenId.toLowerCase() : givenId;
    if (!isSandboxId(sandboxId)) {
      throw new InvalidRequestError(
        "sandboxId is not a valid sandbox id (lowercase letters, digits and '-', 1-63 characters).",
        { issues: [{ path: ["sandboxId"], message: "invalid sandbox id" }] },
      );
    }
    const answers = await Promise.allSettled(
      to(sandboxId).map((bridge) =>
        this.#post(bridge, sandboxId, signal, retry).then(
          (response) => ({ cancelled: response.cancelled, supported: true }),
          (error: unknown) => {
            if (isMissingRoute(error)) return { cancelled: false, supported: false };
            throw error;
          },
        ),
      ),
    );
    const results = answers.flatMap((answer) =>
      answer.status === "fulfilled" ? [answer.value] : [],
    );
    const failure = answers.find((answer) => answer.status === "rejected");
    if (failure !== undefined && !results.some((result) => result.cancelled)) {
      throw failure.reason;
    }
    return {
      sandboxId,
      cancelled: results.some((result) => result.cancelled),
      supported: results.some((result) => result.supported),
    };
  }

  /** Fire and forget: never throws, bounded by its own short deadline; `close()` waits for it. */
  inBackground(bridge: Bridge, sandboxId: string): void {
    if (this.#closed) return;
    const pending = this.#post(bridge, sandboxId, undefined, NO_RETRY, BACKGROUND_CANCEL_MS).then(
      () => {},
      () => {},
    );
    this.#background.add(pending);
    void pending.finally(() => this.#background.delete(pending));
  }

  /** No more background cancels; resolves when those in flight have ended. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#background);
  }
}
