/**
 * The Worker's side of the warm pool: which shard to ask, and what to ask it. Each call asks one
 * shard (a second one when the first has nothing ready, which may make it wait for a start), so
 * calls spread over the shards instead of all passing through one Durable Object.
 */
import type { WarmPool as WarmPoolHealth } from "@remote-task/protocol";
import type { WarmPoolConfig } from "./config.js";
import { shardName, type WarmPoolShardRpc } from "./warm-pool-rpc.js";
import { withinMs } from "./within.js";

/**
 * A warm container lent to one call: its sandbox name, the shard that lent it, and whether the
 * call waited for it to start.
 */
export interface WarmClaim {
  name: string;
  shard: number;
  waited: boolean;
}

/** Longest wait for a shard's answer; a claim that takes longer becomes a cold start. */
const SHARD_TIMEOUT_MS = 5_000;
/** Shards asked per claim: the first, then its neighbour when the first had none ready. */
const CLAIM_ATTEMPTS = 2;

/** The Worker's calls to the warm pool's shards: claims, hand-backs, destroys and health. */
export class WarmPoolClient {
  readonly #namespace: DurableObjectNamespace<WarmPoolShardRpc>;
  readonly #config: WarmPoolConfig;
  readonly #version: string;

  constructor(
    namespace: DurableObjectNamespace<WarmPoolShardRpc>,
    config: WarmPoolConfig,
    version: string,
  ) {
    this.#namespace = namespace;
    this.#config = config;
    this.#version = version;
  }

  /**
   * Lends the call `sandboxId` a container, or `undefined` when the shards asked had none: a
   * ready one of the first shard, else one of its neighbour, ready or (within `waitMs`) still
   * starting. When `signal` aborts, the shard waited on is told, so the claim ends at once.
   */
  async claim(
    sandboxId: string,
    timeoutMs: number,
    waitMs: number,
    signal: AbortSignal,
  ): Promise<WarmClaim | undefined> {
    const { shards } = this.#config;
    const first = Math.floor(Math.random() * shards);
    const attempts = Math.min(CLAIM_ATTEMPTS, shards);
    for (let attempt = 0; attempt < attempts && !signal.aborted; attempt++) {
      const shard = (first + attempt) % shards;
      const stub = this.#shard(shard);
      const last = attempt === attempts - 1;
      const wait = last ? waitMs : 0;
      const withdraw = () => {
        this.#ask(stub.withdraw(shard, sandboxId)).catch(() => {});
      };
      signal.addEventListener("abort", withdraw, { once: true });
      try {
        const lent = await this.#ask(
          stub.claim(shard, {
            sandboxId,
            version: this.#version,
            timeoutMs,
            waitMs: wait,
            askingOn: !last,
          }),
          wait,
        );
        if (lent !== null) return { ...lent, shard };
      } finally {
        signal.removeEventListener("abort", withdraw);
      }
    }
    return undefined;
  }

  /** Tells the shard the container was destroyed with its call: it forgets it. */
  release(claim: WarmClaim): Promise<void> {
    return this.#ask(this.#shard(claim.shard).release(claim.shard, claim.name));
  }

  /** Hands back a container found dead before the command was sent: the shard destroys it. */
  discard(claim: WarmClaim): Promise<void> {
    return this.#ask(this.#shard(claim.shard).discard(claim.shard, claim.name));
  }

  /** The warm container lent to `sandboxId`, asked of every shard (for a `/cancel` from elsewhere). */
  async lookup(sandboxId: string): Promise<WarmClaim | undefined> {
    const names = await Promise.all(
      this.#indexes().map((shard) => this.#ask(this.#shard(shard).lookup(shard, sandboxId))),
    );
    const shard = names.findIndex((name) => name !== null);
    const name = names[shard];
    return name === null || name === undefined ? undefined : { name, shard, waited: false };
  }

  /** The pool's size over all shards (waking each, so a pool just enabled starts filling). */
  async stats(): Promise<WarmPoolHealth> {
    const all = await Promise.all(
      this.#indexes().map((shard) => this.#ask(this.#shard(shard).stats(shard))),
    );
    return {
      target: this.#config.target,
      ready: all.reduce((sum, shard) => sum + shard.ready, 0),
      starting: all.reduce((sum, shard) => sum + shard.starting, 0),
      waiting: all.reduce((sum, shard) => sum + shard.waiting, 0),
    };
  }

  /** Wakes every shard so that each fills its share of the pool. */
  async prime(): Promise<void> {
    await this.stats();
  }

  #indexes(): number[] {
    return Array.from({ length: this.#config.shards }, (_, index) => index);
  }

  #shard(index: number): DurableObjectStub<WarmPoolShardRpc> {
    return this.#namespace.get(this.#namespace.idFromName(shardName(index)));
  }

  /** A shard's answer, given `SHARD_TIMEOUT_MS` beyond the time the shard may wait. */
  #ask<T>(call: Promise<T>, waitMs = 0): Promise<T> {
    const limitMs = SHARD_TIMEOUT_MS + waitMs;
    return withinMs(
      call,
      limitMs,
      () => new Error(`a warm pool shard did not answer within ${limitMs} ms`),
    );
  }
}
