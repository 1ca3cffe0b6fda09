/**
 * The Worker's side of the warm pool: which shard to ask, and what to ask it. Each call asks one
 * shard (a second one when the first has nothing ready), so calls spread over the shards instead
 * of all passing through one Durable Object.
 */
import type { WarmPool as WarmPoolHealth } from "@remote-task/protocol";
import type { WarmPoolConfig } from "./config.js";
import { shardName, type WarmPoolShardRpc } from "./warm-pool-rpc.js";
import { withinMs } from "./within.js";

/** A warm container lent to one call: its sandbox name and the shard that lent it. */
export interface WarmClaim {
  name: string;
  shard: number;
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

  /** Lends the call `sandboxId` a ready container, or `undefined` when the shards asked had none. */
  async claim(sandboxId: string, timeoutMs: number): Promise<WarmClaim | undefined> {
    const { shards } = this.#config;
    const first = Math.floor(Math.random() * shards);
    for (let attempt = 0; attempt < Math.min(CLAIM_ATTEMPTS, shards); attempt++) {
      const shard = (first + attempt) % shards;
      const name = await this.#ask(
        this.#shard(shard).claim(shard, { sandboxId, version: this.#version, timeoutMs }),
      );
      if (name !== null) return { name, shard };
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
    return name === null || name === undefined ? undefined : { name, shard };
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

  #ask<T>(call: Promise<T>): Promise<T> {
    return withinMs(
      call,
      SHARD_TIMEOUT_MS,
      () => new Error(`a warm pool shard did not answer within ${SHARD_TIMEOUT_MS} ms`),
    );
  }
}
