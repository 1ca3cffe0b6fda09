/**
 * What the Worker asks of a warm pool shard: the RPC surface the shard (warm-pool.ts) implements
 * and the client (warm-pool-client.ts) calls, so that the Worker's bindings can name it without
 * importing the shard, and neither side imports the other.
 */

/** What a call sends to claim a container. */
export interface ClaimRequest {
  sandboxId: string;
  /** The calling Worker's version: only containers of the same version are lent. */
  version: string;
  /** The call's timeout: a claim still held long after it counts as orphaned. */
  timeoutMs: number;
  /**
   * How long the call may wait, when none is ready, for a container the shard is starting
   * (0 or absent: only a ready one). The shard makes a call wait only for a start no earlier
   * call waits for (launched for it if need be), so it waits about as long as its own cold
   * start would take, often less.
   */
  waitMs?: number;
  /**
   * Whether another shard is asked next when this one has none ready: such a miss is not counted
   * toward this shard's refill pace (the next shard counts the call), so a call counts once.
   */
  askingOn?: boolean;
}

/** A container lent to a call: its sandbox name, and whether the call waited for its start. */
export interface Lent {
  name: string;
  waited: boolean;
}

/** One shard's share of the pool, as `/health` sums it up, and the claims it has served. */
export interface ShardStats {
  target: number;
  ready: number;
  starting: number;
  /** Calls waiting for one of its starts now. */
  waiting: number;
  /** Containers this shard has lent since it was created. */
  claims: number;
}

/** The shard's methods a Worker calls; `shard` is the caller's number for it. */
export interface WarmPoolShardRpc extends Rpc.DurableObjectBranded {
  /**
   * Lends a container of the caller's version to `request.sandboxId`: a ready one, or one still
   * starting (within `request.waitMs`), or null.
   */
  claim(shard: number, request: ClaimRequest): Promise<Lent | null>;
  /** The call `sandboxId` no longer waits for a container: its claim answers null at once. */
  withdraw(shard: number, sandboxId: string): Promise<void>;
  /** The call destroyed its container: forget it. */
  release(shard: number, name: string): Promise<void>;
  /** A call found its container dead before sending it anything: destroy it. */
  discard(shard: number, name: string): Promise<void>;
  /** The container lent to `sandboxId`, or null. */
  lookup(shard: number, sandboxId: string): Promise<string | null>;
  stats(shard: number): Promise<ShardStats>;
}

/** The Durable Object name of shard `index`. */
export function shardName(index: number): string {
  return `warm-pool-shard-${index}`;
}
