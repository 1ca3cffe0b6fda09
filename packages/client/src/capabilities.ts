/**
 * What each bridge can take, from its `/health`: whether it enforces `network`, reads `stdin` and
 * knows `secrets` (asked once per bridge, before its first call with any of them), and how many calls the bridges
 * can take now (for `runMany`'s first window).
 */
import type { ExecRequest, HealthResponse } from "@remote-task/protocol";
import type { Bridge } from "./bridges.js";
import { DEFAULT_CONCURRENCY } from "./config.js";
import { ConnectionError, ForbiddenError, InvalidRequestError } from "./errors.js";
import { crossOriginPage } from "./page-origin.js";

/** Tries of a `/health` asked to learn whether a bridge re-attaches, after a dropped connection. */
const DURABLE_HEALTH_TRIES = 3;

/** The bridges' answers about the fields a call may carry and whether it re-attaches, each asked once. */
export class BridgeCapabilities {
  /** Each bridge's `/health`, asked once before its first call with `network`, `stdin` or `secrets`. */
  readonly #support = new Map<Bridge, Promise<HealthResponse>>();
  readonly #health: (bridge: Bridge) => Promise<HealthResponse>;

  constructor(health: (bridge: Bridge) => Promise<HealthResponse>) {
    this.#health = health;
  }

  /** The bridge's `/health`, asked once (again after a failure). */
  #healthOf(bridge: Bridge): Promise<HealthResponse> {
    let support = this.#support.get(bridge);
    if (support === undefined) {
      support = this.#health(bridge).catch((error: unknown) => {
        this.#support.delete(bridge);
        throw error;
      });
      this.#support.set(bridge, support);
    }
    return support;
  }

  /**
   * Whether `bridge` re-attaches to calls (its `/health` reports `durable`): asked once, with a
   * few tries when the connection drops (it is asked just after a call's connection dropped).
   */
  async reattaches(bridge: Bridge): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.#healthOf(bridge)).durable !== undefined;
      } catch (error) {
        if (!ConnectionError.isInstance(error) || attempt >= DURABLE_HEALTH_TRIES) return false;
      }
    }
  }

  /**
   * A bridge that does not know `network`, `stdin` or `secrets` may ignore them (the reference
   * bridge does) and run the command without the policy, with empty input, or without the
   * secrets. Before the first call with any of them, the bridge's `/health` is asked once whether
   * it takes them; if not, nothing is sent. From a browser page on another origin, `/health` is
   * asked before the first call of any kind (see page-origin.ts): when the browser cannot fetch
   * it, the command is not sent.
   * Undefined when there is nothing to ask (most calls: they go on without waiting a turn).
   */
  assertTakes(request: ExecRequest, bridge: Bridge): Promise<void> | undefined {
    const page = crossOriginPage(bridge.target.baseUrl);
    if (
      request.network === undefined &&
      request.stdin === undefined &&
      request.secrets === undefined &&
      request.detach !== true &&
      page === undefined
    ) {
      return undefined;
    }
    return this.#assertHealthTakes(request, bridge, page);
  }

  /** {@link assertTakes} once the bridge's `/health` is needed. */
  async #assertHealthTakes(
    request: ExecRequest,
    bridge: Bridge,
    page: string | undefined,
  ): Promise<void> {
    let health: HealthResponse;
    try {
      health = await this.#healthOf(bridge);
    } catch (error) {
      // See page-origin.ts: a browser's failed fetch of /health before the command is sent.
      if (page !== undefined && ConnectionError.isInstance(error)) {
        throw new ConnectionError(
          `The browser could not fetch the bridge's /health from this page (origin ${page}): the bridge does not allow this origin (CORS; its deployer lists the origins whose pages may call it, e.g. \`remote-task serve --cors-origin ${page}\`), or it cannot be reached. The command was not sent.`,
          { cause: error, retryable: false, mayHaveRun: false },
        );
      }
      throw error;
    }
    const protocol = health.protocol ?? 1;
    if (request.detach === true && health.durable === undefined) {
      throw new InvalidRequestError(
        `The bridge keeps no calls (its /health reports no \`durable\`; protocol ${protocol}), so a detached call could not be re-attached; the call was not sent. Use run(), or a bridge with durable calls.`,
        { issues: [{ path: ["detach"], message: "not supported by this bridge" }] },
      );
    }
    if (request.network !== undefined && health.network === undefined) {
      throw new ForbiddenError(
        `The bridge does not control network access (its /health reports no \`network\`; protocol ${protocol}), so it could run the command without the policy asked for; the call was not sent. Leave \`network\` out to run with the bridge's own network, or use a bridge that enforces policies.`,
      );
    }
    // A bridge that knows `secrets` refuses names it does not declare (403); one older than
    // protocol 2 (the reference bridge) would drop the field and run the command without them.
    if (request.secrets !== undefined && health.secrets === undefined && protocol < 2) {
      throw new ForbiddenError(
        `The bridge does not know secrets (its /health reports no \`secrets\`; protocol ${protocol}), so it could run the command without them; the call was not sent. Leave \`secrets\` out, or use a bridge that declares them.`,
      );
    }
    if (request.stdin !== undefined && health.limits?.maxStdinBytes === undefined) {
      throw new InvalidRequestError(
        `The bridge does not take stdin (its /health reports no \`limits.maxStdinBytes\`; protocol ${protocol}), so the command could run with empty input; the call was not sent. Leave \`stdin\` out, or use a protocol 2 bridge.`,
        {
          issues: [
            { path: ["stdin"], message: `not supported by this bridge (protocol ${protocol})` },
          ],
        },
      );
    }
  }
}

/**
 * How many calls the bridges can take now, from their `/health` admissions (free slots and
 * places in their queues; undefined for a bridge that did not answer); a bridge that reports no
 * admission counts as the default concurrency. Undefined when none reports it.
 */
export function freeCapacity(
  admissions: ReadonlyArray<HealthResponse["admission"] | undefined>,
): number | undefined {
  if (admissions.every((admission) => admission === undefined)) return undefined;
  let free = 0;
  for (const admission of admissions) {
    if (admission === undefined) free += DEFAULT_CONCURRENCY;
    else {
      const { maxConcurrent, maxQueued, running, queued } = admission;
      free += Math.max(0, maxConcurrent + maxQueued - running - queued);
    }
  }
  return free;
}
