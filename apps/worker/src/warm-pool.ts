/**
 * The warm pool: containers started ahead of calls, so a call does not wait for a cold start.
 * Each warm container is lent to exactly one call, which destroys it when it ends; none is ever
 * returned to the pool or lent twice. The pool is spread over shards (this Durable Object), each
 * keeping its share of `WARM_POOL_TARGET` ready; a call asks one shard, so no single object sees
 * every call. A call that finds none ready waits for one the shard is starting (each waiting call
 * is promised one start in flight) rather than start its own.
 *
 * A shard keeps one row per container it started (SQLite, so a restart loses nothing) and does
 * all slow work in its alarm: starting containers and destroying the ones it gives up on. Its
 * refill follows the rate calls drain it: it starts one container for each waiting call and
 * replaces each container lent at once, so that its spare ones (ready, or starting and promised
 * to no call) come back to its target (within half of `MAX_INSTANCES`). It gives up on a
 * container that idled past `WARM_POOL_MAX_IDLE`, one started by an older Worker version (a
 * deploy drains them), one a call found dead, one left half-started by a restart, and one lent
 * to a call that is long over (its Worker died before destroying it). After repeated start
 * failures it pauses its refill, doubling the pause while starts keep failing, and tries one
 * container at a time until one starts. Every container it starts is also destroyed by its own
 * Durable Object's alarm shortly after the pool would have recycled it, should the shard be lost.
 */
import { DurableObject } from "cloudflare:workers";
import type { NetworkPolicy } from "@remote-task/protocol";
import {
  ConfigError,
  versionOf,
  type WarmPoolConfig,
  type WorkerEnv,
  workerConfig,
} from "./config.js";
import {
  type ContainerHandle,
  containerHandle,
  destroyContainer,
  MAX_START_MS,
  startContainer,
  toBackendError,
} from "./container-client.js";
import type { ClaimRequest, Lent, ShardStats, WarmPoolShardRpc } from "./warm-pool-rpc.js";
import { withinMs } from "./within.js";

type ContainerState = "starting" | "ready" | "claimed" | "doomed";

/** The shard's share of the pool and what its containers are started with. */
interface ShardPool {
  /** Spare containers (ready, or starting and promised to no call) the shard keeps. */
  target: number;
  /** Most containers the shard holds (lent ones aside): its share of half of MAX_INSTANCES. */
  ceiling: number;
  config: WarmPoolConfig;
  version: string;
  /** The deployment's default network policy, which the pool's containers run with. */
  network: NetworkPolicy;
}

/** A call that found no container ready, waiting for one being started. */
interface Waiter {
  request: ClaimRequest;
  resolve: (name: string | null) => void;
  timer: ReturnType<typeof setTimeout>;
}

interface ContainerRow extends Record<string, SqlStorageValue> {
  name: string;
  state: ContainerState;
  version: string;
  /** When the container entered its state (ms). */
  since: number;
  /** For `claimed`: the call it was lent to. */
  sandbox_id: string | null;
  /** For `claimed`: when the claim counts as orphaned; for `doomed`: when to (re)try the destroy. */
  due: number;
}

/** Longest a container start may take (placement and its first command). */
const START_BUDGET_MS = MAX_START_MS;
const DESTROY_TIMEOUT_MS = 30_000;
const DESTROY_RETRY_MS = 30_000;
/** A claim is orphaned this long after its call's deadline (the call's destroy would be done). */
const CLAIM_GRACE_MS = DESTROY_TIMEOUT_MS + 60_000;
/** A warm container is destroyed by its own object this long after the pool would have recycled it. */
const SLEEP_MARGIN_SECONDS = 120;
/** Consecutive start failures that pause the refill. */
const FAILURES_BEFORE_PAUSE = 3;
const FIRST_PAUSE_MS = 5_000;
const LONGEST_PAUSE_MS = 5 * 60_000;
/** What a start is taken to last until the shard has seen some (the refill's pace, Little's law). */
const DEFAULT_START_MS = 5_000;
/** Starts whose times the shard remembers for its pace. */
const START_SAMPLES = 16;
/** How often a shard with a target looks at its containers when nothing else is due. */
const CHECK_INTERVAL_MS = 60_000;
/** Longest one alarm runs before handing over to the next one. */
const ALARM_BUDGET_MS = 60_000;
/** Shard `index`'s share of a pool of `target` containers over `shards` shards. */
export function shareOf(target: number, shards: number, index: number): number {
  if (index >= shards) return 0;
  return Math.floor(target / shards) + (index < target % shards ? 1 : 0);
}

/** The warm pool's shard Durable Object (binding `WarmPool`); see the top of this file. */
export class WarmPoolShard extends DurableObject<WorkerEnv> implements WarmPoolShardRpc {
  readonly #sql: SqlStorage;
  /** Container starts and destroys in flight in this instance, by container name. */
  readonly #starting = new Map<string, Promise<void>>();
  readonly #destroying = new Map<string, Promise<void>>();
  #index: number | undefined;
  #alarmRunning = false;
  #wake: (() => void) | undefined;
  /** Consecutive start failures, pauses in a row, and the end of the current pause. */
  #failures = 0;
  #pauses = 0;
  #pausedAt = 0;
  #pausedUntil = 0;
  /** Calls waiting for a start in flight, oldest first (each is promised one). */
  readonly #waiters: Waiter[] = [];
  /** When calls asked for a container (lent or not), oldest first, and recent start times. */
  readonly #claimedAt: number[] = [];
  readonly #startTimes: number[] = [];

  constructor(ctx: DurableObjectState, env: WorkerEnv) {
    super(ctx, env);
    this.#sql = ctx.storage.sql;
    this.#sql.exec(
      `CREATE TABLE IF NOT EXISTS containers (
        name TEXT PRIMARY KEY, state TEXT NOT NULL, version TEXT NOT NULL,
        since INTEGER NOT NULL, sandbox_id TEXT, due INTEGER NOT NULL)`,
    );
    this.#sql.exec(
      "CREATE TABLE IF NOT EXISTS shard (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    );
    const stored = this.#sql.exec<{ value: number }>("SELECT value FROM shard WHERE key = 'index'");
    this.#index = stored.toArray()[0]?.value;
  }

  /**
   * Lends the oldest ready container of the caller's version to `request.sandboxId`. With none
   * ready, the call may wait (`request.waitMs`) for one of the starts in flight that no earlier
   * call waits for: the refill launches a start for each waiting call (within its ceiling), so a
   * call that misses costs one start, not two (its own and the refill's), and gets the first of
   * the shard's starts to finish rather than one it must wait out alone.
   */
  async claim(shard: number, request: ClaimRequest): Promise<Lent | null> {
    this.#learnIndex(shard);
    const pool = this.#pool();
    const current = request.version === pool.version;
    const ready = current
      ? this.#sql
          .exec<{ name: string }>(
            "SELECT name FROM containers WHERE state = 'ready' AND version = ? ORDER BY since LIMIT 1",
            pool.version,
          )
          .toArray()[0]?.name
      : undefined;
    if (ready !== undefined) {
      this.#lend(ready, request);
      this.#claimedAt.push(Date.now());
      await this.#refillSoon();
      return { name: ready, waited: false };
    }
    if (request.askingOn !== true) this.#claimedAt.push(Date.now());
    const waitMs = Math.min(request.waitMs ?? 0, START_BUDGET_MS);
    if (!current || pool.target === 0 || waitMs <= 0) {
      await this.#refillSoon();
      return null;
    }
    const lent = new Promise<string | null>((resolve) => {
      const waiter: Waiter = {
        request,
        resolve,
        timer: setTimeout(() => this.#unwait(waiter, null), waitMs),
      };
      this.#waiters.push(waiter);
    });
    // The alarm's refill launches a start for it, or answers null when it cannot.
    await this.#refillSoon();
    const name = await lent;
    return name === null ? null : { name, waited: true };
  }

  /** The call `sandboxId` no longer waits for a container: its claim answers null. */
  async withdraw(shard: number, sandboxId: string): Promise<void> {
    this.#learnIndex(shard);
    const waiter = this.#waiters.find((w) => w.request.sandboxId === sandboxId);
    if (waiter !== undefined) this.#unwait(waiter, null);
  }

  /** The call destroyed its container: forget it. */
  async release(shard: number, name: string): Promise<void> {
    this.#learnIndex(shard);
    this.#sql.exec("DELETE FROM containers WHERE name = ? AND state = 'claimed'", name);
  }

  /** A call found its container dead before sending it anything: destroy it. */
  async discard(shard: number, name: string): Promise<void> {
    this.#learnIndex(shard);
    this.#sql.exec(
      "UPDATE containers SET state = 'doomed', due = ? WHERE name = ? AND state = 'claimed'",
      Date.now(),
      name,
    );
    log(shard, "info", "discarded", { container: name, reason: "found dead when claimed" });
    await this.#refillSoon();
  }

  /** The container lent to `sandboxId`, or null. */
  async lookup(shard: number, sandboxId: string): Promise<string | null> {
    this.#learnIndex(shard);
    const row = this.#sql
      .exec<{ name: string }>(
        "SELECT name FROM containers WHERE sandbox_id = ? AND state = 'claimed'",
        sandboxId,
      )
      .toArray()[0];
    return row?.name ?? null;
  }

  /** This shard's target and its ready and starting containers (of the current version). */
  async stats(shard: number): Promise<ShardStats> {
    this.#learnIndex(shard);
    const pool = this.#pool();
    await this.#refillSoon();
    const claims = this.#sql
      .exec<{ value: number }>("SELECT value FROM shard WHERE key = 'claims'")
      .toArray()[0];
    return {
      target: pool.target,
      ...this.#counts(pool.version),
      waiting: this.#waiters.length,
      claims: claims?.value ?? 0,
    };
  }

  override async alarm(): Promise<void> {
    if (this.#alarmRunning) return;
    this.#alarmRunning = true;
    const until = Date.now() + ALARM_BUDGET_MS;
    const budget = new AbortController();
    const outOfTime = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ALARM_BUDGET_MS);
      budget.signal.addEventListener("abort", () => clearTimeout(timer));
    });
    try {
      for (;;) {
        const pool = this.#pool();
        this.#sweep(pool);
        this.#refill(pool);
        this.#releaseUnpromised();
        const pending = [...this.#starting.values(), ...this.#destroying.values()];
        if (pending.length === 0) break;
        if (Date.now() >= until) {
          // Hand over to a fresh alarm; the work in flight carries on.
          await this.ctx.storage.setAlarm(Date.now());
          return;
        }
        const woken = new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
        await Promise.race([...pending, woken, outOfTime]);
      }
      await this.#scheduleNext(this.#pool());
    } catch (error) {
      log(this.#index, "error", "alarm_failed", { detail: String(error) });
      await this.ctx.storage.setAlarm(Date.now() + DESTROY_RETRY_MS);
    } finally {
      budget.abort();
      this.#alarmRunning = false;
      this.#wake = undefined;
    }
  }

  /**
   * The Worker's variables and bindings the shard works to: its own `env` (tests replace it),
   * the same object on every use, so that its configuration is read once.
   */
  protected variables(): WorkerEnv {
    return this.env;
  }

  /** Starts one container of the pool (tests hold starts back to see what waits for them). */
  protected startOne(
    sandbox: ContainerHandle,
    network: NetworkPolicy,
    backstopMs: number,
  ): Promise<void> {
    return startContainer(sandbox, START_BUDGET_MS, network, backstopMs);
  }

  /** The shard's share of the pool, from the Worker's variables (none when they are unusable). */
  #pool(): ShardPool {
    const variables = this.variables();
    const read = workerConfig(variables);
    if (ConfigError.isInstance(read)) {
      return {
        target: 0,
        ceiling: 0,
        config: { target: 0, maxIdleSeconds: 60, refillBatch: 1, shards: 0, ceiling: 0 },
        version: versionOf(variables),
        network: "none",
      };
    }
    const config = read.warmPool;
    const index = this.#index ?? 0;
    const target = shareOf(config.target, config.shards, index);
    const ceiling = Math.max(target, shareOf(config.ceiling, config.shards, index));
    return {
      target,
      ceiling,
      config,
      version: read.version,
      network: read.network.default,
    };
  }

  /** How long a start takes here: the mean of the recent ones. */
  #startMs(): number {
    const times = this.#startTimes;
    return times.length === 0
      ? DEFAULT_START_MS
      : times.reduce((sum, ms) => sum + ms, 0) / times.length;
  }

  /** Calls that asked for a container within the last start time (older ones are forgotten). */
  #recentClaims(): number {
    const since = Date.now() - this.#startMs();
    while ((this.#claimedAt[0] ?? since) < since) this.#claimedAt.shift();
    return this.#claimedAt.length;
  }

  /** A shard learns its number from the first call that reaches it (its alarm has none). */
  #learnIndex(shard: number): void {
    if (this.#index === shard) return;
    this.#index = shard;
    this.#sql.exec("INSERT OR REPLACE INTO shard (key, value) VALUES ('index', ?)", shard);
  }

  /** Lends `name` to the call of `request`. */
  #lend(name: string, request: ClaimRequest): void {
    const now = Date.now();
    this.#sql.exec(
      "UPDATE containers SET state = 'claimed', since = ?, sandbox_id = ?, due = ? WHERE name = ?",
      now,
      request.sandboxId,
      now + request.timeoutMs + CLAIM_GRACE_MS,
      name,
    );
    this.#sql.exec(
      "INSERT INTO shard (key, value) VALUES ('claims', 1) ON CONFLICT (key) DO UPDATE SET value = value + 1",
    );
  }

  /** Ends a call's wait with `name` (a container lent to it) or null. */
  #unwait(waiter: Waiter, name: string | null): void {
    const at = this.#waiters.indexOf(waiter);
    if (at >= 0) this.#waiters.splice(at, 1);
    clearTimeout(waiter.timer);
    waiter.resolve(name);
  }

  /**
   * Each waiting call is promised a start in flight of its version, oldest call first; the ones
   * left without (the refill paused, or at its ceiling) are answered null and start their own.
   */
  #releaseUnpromised(): void {
    const starts = new Map<string, number>();
    for (const row of this.#rows()) {
      if (row.state === "starting" && this.#starting.has(row.name)) {
        starts.set(row.version, (starts.get(row.version) ?? 0) + 1);
      }
    }
    for (const waiter of [...this.#waiters]) {
      const left = starts.get(waiter.request.version) ?? 0;
      if (left > 0) starts.set(waiter.request.version, left - 1);
      else this.#unwait(waiter, null);
    }
  }

  /** Gets the alarm's loop going now, or wakes it if it runs. */
  async #refillSoon(): Promise<void> {
    if (this.#alarmRunning) {
      this.#wake?.();
      return;
    }
    const at = await this.ctx.storage.getAlarm();
    if (at === null || at > Date.now()) await this.ctx.storage.setAlarm(Date.now());
  }

  #rows(): ContainerRow[] {
    return this.#sql.exec<ContainerRow>("SELECT * FROM containers").toArray();
  }

  #counts(version: string): { ready: number; starting: number } {
    let ready = 0;
    let starting = 0;
    for (const row of this.#rows()) {
      if (row.version !== version) continue;
      if (row.state === "ready") ready++;
      else if (row.state === "starting") starting++;
    }
    return { ready, starting };
  }

  /** Dooms the containers the pool gives up on, and destroys the doomed ones that are due. */
  #sweep(pool: ShardPool): void {
    const now = Date.now();
    const maxIdleMs = pool.config.maxIdleSeconds * 1000;
    const doomed: Record<string, number> = {};
    const doom = (row: ContainerRow, reason: string) => {
      this.#sql.exec(
        "UPDATE containers SET state = 'doomed', due = ? WHERE name = ?",
        now,
        row.name,
      );
      row.state = "doomed";
      row.due = now;
      doomed[reason] = (doomed[reason] ?? 0) + 1;
    };
    const rows = this.#rows();
    for (const row of rows) {
      if (row.state === "ready" && row.version !== pool.version) doom(row, "older_version");
      else if (row.state === "ready" && now - row.since > maxIdleMs) doom(row, "idle_too_long");
      else if (row.state === "starting" && !this.#starting.has(row.name)) doom(row, "restarted");
      else if (row.state === "claimed" && now > row.due) doom(row, "orphaned");
    }
    // A lowered target (or a shard no longer in use): the newest ready containers go first.
    const mine = rows.filter(
      (row) => row.version === pool.version && (row.state === "ready" || row.state === "starting"),
    );
    // Starts promised to waiting calls are theirs already.
    const excess = mine.length - this.#promised() - pool.target;
    const spare = mine.filter((row) => row.state === "ready").sort((a, b) => b.since - a.since);
    for (const row of spare.slice(0, Math.max(0, excess))) doom(row, "above_target");
    if (Object.keys(doomed).length > 0) log(this.#index, "info", "destroying", { doomed });
    for (const row of rows) {
      if (row.state === "doomed" && row.due <= now && !this.#destroying.has(row.name)) {
        this.#destroy(row.name);
      }
    }
  }

  #destroy(name: string): void {
    const work = destroyContainer(containerHandle(this.env.TaskContainer, name), DESTROY_TIMEOUT_MS)
      .then(
        () => {
          this.#sql.exec("DELETE FROM containers WHERE name = ?", name);
        },
        (error: unknown) => {
          this.#sql.exec(
            "UPDATE containers SET due = ? WHERE name = ?",
            Date.now() + DESTROY_RETRY_MS,
            name,
          );
          log(this.#index, "error", "destroy_failed", {
            container: name,
            detail: toBackendError(error).message,
          });
        },
      )
      .finally(() => this.#destroying.delete(name));
    this.#destroying.set(name, work);
  }

  /**
   * Starts containers unless the refill pauses: one for each waiting call no start is promised
   * to, and spare ones up to the shard's target. Every claim is so replaced at once, and the
   * starts in flight follow the rate calls drain the shard (Little's law); spare starts go at most
   * as many at a time as calls asked for during the last start time (at least `refillBatch`).
   * Every container the shard holds counts against its ceiling, promised ones and the ones still
   * being destroyed too (after a deploy, or found dead), so the pool never takes more instances
   * than that; a waiting call beyond it is told to start its own.
   */
  #refill(pool: ShardPool): void {
    if (Date.now() < this.#pausedUntil) return;
    const held = this.#rows().filter((row) => row.state !== "claimed").length;
    const promised = this.#promised();
    const forWaiters = this.#waiters.length - promised;
    const batch = Math.max(pool.config.refillBatch, this.#recentClaims());
    const spare = Math.min(
      pool.target - (held - promised),
      batch - (this.#starting.size - promised),
    );
    let count = Math.min(pool.ceiling - held, forWaiters + Math.max(0, spare));
    // After a pause, one container at a time until one starts.
    if (this.#pauses > 0) count = Math.min(count, 1 - this.#starting.size);
    for (let i = 0; i < count; i++) this.#start(pool);
  }

  /** Starts in flight promised to waiting calls (each waiting call is promised one, if any). */
  #promised(): number {
    return Math.min(this.#waiters.length, this.#starting.size);
  }

  #start(pool: ShardPool): void {
    const name = `warm-${crypto.randomUUID()}`;
    const now = Date.now();
    this.#sql.exec(
      "INSERT INTO containers (name, state, version, since, sandbox_id, due) VALUES (?, 'starting', ?, ?, NULL, ?)",
      name,
      pool.version,
      now,
      now + START_BUDGET_MS,
    );
    const backstopMs = (pool.config.maxIdleSeconds + SLEEP_MARGIN_SECONDS) * 1000;
    // Started with the deployment's default network policy: the Worker lends it only to a call
    // with that policy (a change of the policy is a new version, which drains the pool).
    const work = withinMs(
      this.startOne(containerHandle(this.env.TaskContainer, name), pool.network, backstopMs),
      START_BUDGET_MS,
      () => new Error(`the container was not ready within ${START_BUDGET_MS / 1000} s`),
    )
      .then(
        () => {
          // Lent at once to the call waiting longest, if one waits; otherwise ready.
          const waiter = this.#waiters.find((w) => w.request.version === pool.version);
          const written = this.#sql.exec(
            "UPDATE containers SET state = 'ready', since = ? WHERE name = ? AND state = 'starting'",
            Date.now(),
            name,
          ).rowsWritten;
          if (waiter !== undefined && written > 0) {
            this.#lend(name, waiter.request);
            this.#unwait(waiter, name);
          }
          this.#startTimes.push(Date.now() - now);
          if (this.#startTimes.length > START_SAMPLES) this.#startTimes.shift();
          this.#failures = 0;
          if (this.#pauses > 0) log(this.#index, "info", "refill_resumed", { container: name });
          this.#pauses = 0;
        },
        (error: unknown) => {
          // A start that failed may still have left a container behind.
          this.#sql.exec(
            "UPDATE containers SET state = 'doomed', due = ? WHERE name = ?",
            Date.now(),
            name,
          );
          this.#startFailed(name, now, error);
        },
      )
      .finally(() => this.#starting.delete(name));
    this.#starting.set(name, work);
  }

  /**
   * Counts a failed start. The third in a row pauses the refill; while it probes after a pause,
   * one failure pauses it again, twice as long. A start launched before the current pause began
   * (the rest of its batch) does not count again.
   */
  #startFailed(name: string, launchedAt: number, error: unknown): void {
    const detail = toBackendError(error).message;
    if (launchedAt < this.#pausedAt) {
      log(this.#index, "error", "start_failed", { container: name, detail });
      return;
    }
    this.#failures++;
    if (this.#failures < FAILURES_BEFORE_PAUSE && this.#pauses === 0) {
      log(this.#index, "error", "start_failed", { container: name, detail });
      return;
    }
    const pauseMs = Math.min(LONGEST_PAUSE_MS, FIRST_PAUSE_MS * 2 ** this.#pauses);
    this.#pauses++;
    this.#failures = 0;
    this.#pausedAt = Date.now();
    this.#pausedUntil = this.#pausedAt + pauseMs;
    log(this.#index, "error", "refill_paused", { container: name, detail, pauseMs });
  }

  /** The next alarm: the earliest thing due, a pause's end, or a periodic look while in use. */
  async #scheduleNext(pool: ShardPool): Promise<void> {
    const now = Date.now();
    const maxIdleMs = pool.config.maxIdleSeconds * 1000;
    const times: number[] = [];
    for (const row of this.#rows()) {
      if (row.state === "ready") times.push(row.since + maxIdleMs);
      else if (row.state === "claimed" || row.state === "doomed") times.push(row.due);
      else times.push(now);
    }
    const held = this.#rows().filter((row) => row.state !== "claimed").length;
    if (held < pool.target) times.push(Math.max(now, this.#pausedUntil));
    if (pool.target > 0) times.push(now + CHECK_INTERVAL_MS);
    if (times.length === 0) {
      await this.ctx.storage.deleteAlarm();
      return;
    }
    await this.ctx.storage.setAlarm(Math.max(now, Math.min(...times)));
  }
}

/** One JSON line per pool event (`npx wrangler tail` shows them beside the bridge's lines). */
function log(
  shard: number | undefined,
  level: "info" | "error",
  action: string,
  details: Record<string, unknown>,
): void {
  const line = JSON.stringify({
    time: new Date().toISOString(),
    event: "warm_pool",
    level,
    shard,
    action,
    ...details,
  });
  if (level === "error") console.error(line);
  else console.log(line);
}
