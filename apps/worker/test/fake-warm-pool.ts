/**
 * The warm pool's real shard class, bound as `WarmPool` in the test Worker, with test hooks: the
 * variables it works to are the test's (a Durable Object's `env` is the Worker's, the same for
 * every test), its clock can be moved by ageing its rows, and its container starts can be held
 * back and let go one by one.
 */

import type { NetworkPolicy } from "@remote-task/protocol";
import type { WorkerEnv } from "../src/config.js";
import type { ContainerHandle } from "../src/container-client.js";
import { WarmPoolShard } from "../src/warm-pool.js";

export type PoolVariables = Pick<
  WorkerEnv,
  | "WARM_POOL_TARGET"
  | "WARM_POOL_MAX_IDLE"
  | "WARM_POOL_REFILL_BATCH"
  | "MAX_INSTANCES"
  | "NETWORK_DEFAULT"
  | "NETWORK_CEILING"
> & { version: string };

export interface ShardRow {
  name: string;
  state: string;
  version: string;
  sandboxId: string | null;
}

export class TestWarmPoolShard extends WarmPoolShard {
  /** The test's variables over the shard's own: one object per `setVariables`, read once. */
  #env: WorkerEnv | undefined;

  /** Starts held back, in launch order, while holding (`undefined`: starts run at once). */
  #held: Array<() => void> | undefined;

  async holdStarts(): Promise<void> {
    this.#held ??= [];
  }

  /** Lets `count` held starts run (all of them, and stops holding, without a count). */
  async releaseStarts(count?: number): Promise<void> {
    const held = this.#held ?? [];
    for (const release of held.splice(0, count ?? held.length)) release();
    if (count === undefined) this.#held = undefined;
  }

  /** Starts launched and held back. */
  async heldStarts(): Promise<number> {
    return this.#held?.length ?? 0;
  }

  protected override startOne(
    sandbox: ContainerHandle,
    network: NetworkPolicy,
    backstopMs: number,
  ): Promise<void> {
    const held = this.#held;
    if (held === undefined) return super.startOne(sandbox, network, backstopMs);
    return new Promise<void>((resolve) => held.push(resolve)).then(() =>
      super.startOne(sandbox, network, backstopMs),
    );
  }

  async setVariables(variables: PoolVariables): Promise<void> {
    const { version, ...rest } = variables;
    this.#env = {
      ...this.env,
      ...rest,
      CF_VERSION_METADATA: { id: version, tag: "", timestamp: new Date(0).toISOString() },
    };
  }

  protected override variables(): WorkerEnv {
    return this.#env ?? this.env;
  }

  async rows(): Promise<ShardRow[]> {
    return this.ctx.storage.sql
      .exec<{ name: string; state: string; version: string; sandbox_id: string | null }>(
        "SELECT name, state, version, sandbox_id FROM containers ORDER BY name",
      )
      .toArray()
      .map((row) => ({ ...row, sandboxId: row.sandbox_id }));
  }

  /** Moves the shard's clock: ready containers became ready `ms` earlier. */
  async ageReady(ms: number): Promise<void> {
    this.ctx.storage.sql.exec("UPDATE containers SET since = since - ? WHERE state = 'ready'", ms);
  }

  /** What a restart leaves behind: a container row marked starting, with no start under way. */
  async addStarting(name: string, version: string): Promise<void> {
    this.ctx.storage.sql.exec(
      "INSERT INTO containers (name, state, version, since, sandbox_id, due) VALUES (?, 'starting', ?, ?, NULL, ?)",
      name,
      version,
      Date.now(),
      Date.now() + 120_000,
    );
  }

  /** Moves the shard's clock: every claim's call ended long ago. */
  async expireClaims(): Promise<void> {
    this.ctx.storage.sql.exec("UPDATE containers SET due = 0 WHERE state = 'claimed'");
  }
}
