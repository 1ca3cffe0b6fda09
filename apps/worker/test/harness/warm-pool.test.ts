/**
 * The warm pool against the real container plumbing: the built Worker in Miniflare, its
 *  `WarmPoolShard` and `TaskContainer` Durable Objects, containers served by the harness's
 * engine with an injected cold start. What the pool promises is checked on the engine's records:
 * each container serves at most one call, is started before the call that uses it, and is deleted.
 */
import { newSandboxId } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ContainerRecord, hostnameOf, isLive } from "./engine.ts";
import { type Answer, commandsRun, WorkerHarness } from "./worker.ts";

const TARGET = 4;
const COLD_START_MS = 2_000;
const SOAK_CALLS = 200;
const SOAK_CONCURRENCY = 4;
const MAX_INSTANCES = 40;
/** Most the pool holds while calls drain it: half of MAX_INSTANCES. */
const CEILING = MAX_INSTANCES / 2;
let harness: WorkerHarness;

beforeAll(async () => {
  harness = await WorkerHarness.start({
    // One start per call: the tests check which container served a call (hedges: hedge.test.ts).
    vars: {
      WARM_POOL_TARGET: String(TARGET),
      MAX_INSTANCES: String(MAX_INSTANCES),
      HEDGE_START_AFTER_MS: "off",
    },
    logLines: 50_000,
  });
  // Every container takes this long to start, as on Cloudflare (seconds).
  harness.engine.faults = { coldStartMs: COLD_START_MS };
}, 120_000);

afterEach(() => {
  expect(harness.engine.problems).toEqual([]);
});

afterAll(async () => {
  try {
    // Nothing any test created is left running but the pool's own waiting containers, and no
    // container served two calls.
    const used = () => harness.engine.live.filter((record) => commandsRun(record) > 0);
    await until(() => used().length === 0 && harness.engine.live.length <= TARGET, 30_000);
    expect(used().map((record) => record.name)).toEqual([]);
    expect(harness.engine.live.length).toBeLessThanOrEqual(TARGET);
    for (const record of harness.engine.records) {
      expect(commandsRun(record), record.name).toBeLessThanOrEqual(1);
    }
  } finally {
    await harness?.close();
  }
}, 120_000);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function until(done: () => boolean | Promise<boolean>, timeout: number): Promise<void> {
  const deadline = Date.now() + timeout;
  while (!(await done()) && Date.now() < deadline) await sleep(100);
}

/** Waits until the pool reports `ready` containers ready and none starting. */
async function filled(ready = TARGET, timeout = 30_000): Promise<void> {
  await expect
    .poll(async () => (await harness.health()).warmPool, { timeout, interval: 100 })
    .toMatchObject({ target: TARGET, ready, starting: 0 });
}

/** The bridge's log line for the call on `sandboxId`. */
function logged(sandboxId: string): Record<string, unknown> | undefined {
  return harness
    .bridgeLog()
    .find((entry) => entry.event === "exec" && entry.sandboxId === sandboxId);
}

function poolEvents(action: string): Array<Record<string, unknown>> {
  return harness
    .bridgeLog()
    .filter((entry) => entry.event === "warm_pool" && entry.action === action);
}

/** Runs `hostname` and returns the container that answered it. */
async function served(answer: Answer): Promise<ContainerRecord> {
  expect(answer.status, answer.text).toBe(200);
  const host = (JSON.parse(answer.text) as { stdout: string }).stdout.trim();
  const record = harness.engine.records.find((r) => hostnameOf(r) === host);
  expect(record, `no container has the host name ${host}`).toBeDefined();
  return record as ContainerRecord;
}

/** Samples the pool every `intervalMs` until stopped: the most it held (ready and starting). */
function mostHeld(intervalMs: number) {
  let most = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const pool = (await harness.health()).warmPool;
      most = Math.max(most, (pool?.ready ?? 0) + (pool?.starting ?? 0));
      await sleep(intervalMs);
    }
  })();
  return {
    most: () => most,
    stop: async () => {
      sampling = false;
      await sampler;
    },
  };
}

/** Containers started and never sent a command, still running: the pool's ready ones. */
function waiting(): ContainerRecord[] {
  return harness.engine.live.filter(
    (record) => commandsRun(record) === 0 && record.events.some((e) => e.event === "running"),
  );
}

describe("the warm pool, through the real Durable Objects", () => {
  it("lends a call a container started before it, which serves only that call and is deleted", async () => {
    await harness.health();
    await filled();
    const sandboxId = newSandboxId("harness");
    const before = Date.now();
    const record = await served(await harness.exec({ sandboxId, command: "hostname" }));
    expect(logged(sandboxId)).toMatchObject({ warm: true, outcome: "exited" });
    // Created and running before the call was made; not the call's own sandbox.
    const running =
      record.events.find((e) => e.event === "running")?.at ?? Number.POSITIVE_INFINITY;
    expect(running).toBeLessThan(before);
    expect(record.durableObjectId).not.toBe(await harness.durableObjectId(sandboxId));
    expect(await harness.containersOf(sandboxId)).toEqual([]);
    await until(() => record.deleted, 10_000);
    expect(record.deleted).toBe(true);
    expect(commandsRun(record)).toBe(1);
    // The pool starts another in its place.
    await filled();
  });

  it("makes the calls beyond the ready containers wait for the pool's starts instead of starting their own", async () => {
    await filled();
    const before = (await harness.health()).warmPool;
    const startedBefore = harness.engine.records.length;
    const t0 = Date.now();
    const ids = Array.from({ length: TARGET * 2 }, () => newSandboxId("harness"));
    const answers = await Promise.all(
      ids.map((sandboxId) => harness.exec({ sandboxId, command: "hostname", timeoutSeconds: 60 })),
    );
    const records = await Promise.all(answers.map((answer) => served(answer)));
    // Each call ran in a container of its own, one the pool started: none started one for itself.
    expect(new Set(records.map((record) => record.id)).size).toBe(ids.length);
    for (const sandboxId of ids) {
      expect(logged(sandboxId)).toMatchObject({ warm: true, outcome: "exited" });
      expect(await harness.containersOf(sandboxId)).toEqual([]);
    }
    // The ones that waited ran in containers created after the calls were made.
    const createdAfter = records.filter(
      (record) => (record.events.find((e) => e.event === "create")?.at ?? 0) >= t0,
    );
    expect(createdAfter.length).toBeGreaterThanOrEqual(TARGET);
    const after = (await harness.health()).warmPool;
    expect((after?.hits ?? 0) - (before?.hits ?? 0)).toBe(TARGET);
    expect((after?.waits ?? 0) - (before?.waits ?? 0)).toBe(TARGET);
    expect((after?.misses ?? 0) - (before?.misses ?? 0)).toBe(0);
    // The pool started one container for each call that waited, not one more (the refill may
    // start more ahead of further calls: those wait in the pool, never sent a command).
    const started = harness.engine.records.slice(startedBefore);
    expect(started.filter((record) => commandsRun(record) > 0)).toHaveLength(TARGET);
    await filled();
  }, 120_000);

  it("discards a warm container found dead and runs the call cold: the dead one never got the command", async () => {
    await filled();
    const dead = waiting();
    expect(dead).toHaveLength(TARGET);
    for (const record of dead) harness.engine.kill(record);
    await until(() => dead.every((record) => !isLive(record)), 10_000);
    // Let workerd see the exits (its container monitor updates each Durable Object).
    await sleep(500);
    const sandboxId = newSandboxId("harness");
    const record = await served(await harness.exec({ sandboxId, command: "hostname" }));
    expect(logged(sandboxId)).toMatchObject({ warm: false, outcome: "exited" });
    expect(dead.map((r) => r.id)).not.toContain(record.id);
    expect(record.durableObjectId).toBe(await harness.durableObjectId(sandboxId));
    expect(dead.map(commandsRun)).toEqual(dead.map(() => 0));
    expect(poolEvents("discarded").length).toBeGreaterThan(0);
    // Calls keep discarding the dead ones until the pool holds live ones again.
    await Promise.all(
      Array.from({ length: TARGET }, () =>
        harness.exec({ sandboxId: newSandboxId("harness"), command: "true" }),
      ),
    );
    await filled();
  }, 120_000);

  it("pauses its refill after repeated start failures, and refills once starts work again", async () => {
    await filled();
    const refusedBefore = refused();
    harness.engine.faults = { coldStartMs: COLD_START_MS, refuseCreate: true };
    try {
      // Take every ready container: the refill's starts are refused.
      await Promise.all(
        Array.from({ length: TARGET }, () =>
          harness.exec({ sandboxId: newSandboxId("harness"), command: "true" }),
        ),
      );
      await expect.poll(() => poolEvents("refill_paused").length, { timeout: 20_000 }).toBe(1);
      // The starts already under way when it paused fail too; then nothing for the pause's length.
      await until(async () => (await harness.health()).warmPool?.starting === 0, 10_000);
      const attempts = refused();
      await sleep(3_000);
      expect(refused()).toBe(attempts);
      // Three failures pause it; at most a batch less one was under way then (the target, and
      // as many again for the calls that just drained it).
      expect(attempts - refusedBefore).toBeLessThanOrEqual(3 + 2 * TARGET - 1);
    } finally {
      harness.engine.faults = { coldStartMs: COLD_START_MS };
    }
    // Starts work again: the probe after the pause succeeds and the pool fills.
    await filled(TARGET, 60_000);
    expect(poolEvents("refill_resumed").length).toBeGreaterThan(0);
  }, 120_000);

  it("keeps as many starts in flight as calls drain it, beyond its target, and gives the extra back after", async () => {
    await filled();
    const claims = async () => {
      const pool = (await harness.health()).warmPool;
      return { lent: (pool?.hits ?? 0) + (pool?.waits ?? 0), misses: pool?.misses ?? 0 };
    };
    const before = await claims();
    const held = mostHeld(100);
    // A batch four times the pool at twice its width: calls keep claiming while the refill runs.
    const calls = TARGET * 4;
    try {
      let next = 0;
      const worker = async () => {
        while (next < calls) {
          next++;
          const answer = await harness.exec({
            sandboxId: newSandboxId("harness"),
            command: "sleep 0.5",
            timeoutSeconds: 60,
          });
          expect(answer.status, answer.text).toBe(200);
        }
      };
      await Promise.all(Array.from({ length: TARGET * 2 }, worker));
    } finally {
      await held.stop();
    }
    const most = held.most();
    const after = await claims();
    expect(after.lent - before.lent + after.misses - before.misses).toBe(calls);
    // More held (ready and starting) than the target: the refill followed the calls (before, a
    // shard never held more than its share of the target), within the ceiling.
    expect(most).toBeGreaterThan(TARGET);
    expect(most).toBeLessThanOrEqual(CEILING);
    // Once the calls are no longer recent, the extra containers are given back.
    await until(async () => {
      const pool = (await harness.health()).warmPool;
      return pool?.ready === TARGET && pool.starting === 0 && waiting().length === TARGET;
    }, 30_000);
    expect(waiting()).toHaveLength(TARGET);
  }, 120_000);

  it("drains the containers an older version started once the Worker is deployed again", async () => {
    await filled();
    const old = waiting();
    expect(old).toHaveLength(TARGET);
    await harness.redeploy();
    // The first request after the deploy wakes the shards.
    await harness.health();
    await until(() => old.every((record) => record.deleted), 30_000);
    expect(old.filter((record) => !record.deleted).map((r) => r.name)).toEqual([]);
    expect(old.map(commandsRun)).toEqual(old.map(() => 0));
    await filled();
    const sandboxId = newSandboxId("harness");
    const record = await served(await harness.exec({ sandboxId, command: "hostname" }));
    expect(logged(sandboxId)).toMatchObject({ warm: true });
    expect(old.map((r) => r.id)).not.toContain(record.id);
  }, 120_000);
});

describe("a soak of the warm pool", () => {
  it("runs 200 calls, none in a container that served another, deletes every one, and keeps the pool within its ceiling", async () => {
    // No cold start here, so that the soak is quick; the refill still races the calls.
    harness.engine.faults = {};
    const first = harness.engine.records.length;
    // Containers the pool holds now may serve calls of the soak though created before it: the
    // pool may hold more than its target after the earlier tests drained it (up to its ceiling).
    const waitingBefore = harness.engine.live.length;
    const held = mostHeld(200);
    const ids: string[] = [];
    try {
      let next = 0;
      const worker = async () => {
        while (next < SOAK_CALLS) {
          next++;
          const sandboxId = newSandboxId("harness");
          ids.push(sandboxId);
          const answer = await harness.exec({ sandboxId, command: "true", timeoutSeconds: 60 });
          expect(answer.status, answer.text).toBe(200);
        }
      };
      await Promise.all(Array.from({ length: SOAK_CONCURRENCY }, worker));
    } finally {
      await held.stop();
      harness.engine.faults = { coldStartMs: COLD_START_MS };
    }
    const most = held.most();
    await until(() => harness.engine.live.every((record) => commandsRun(record) === 0), 30_000);
    const records = harness.engine.records.slice(first);
    // Every call ran in exactly one container (its own or one the pool lent), once.
    expect(records.filter((record) => commandsRun(record) > 1)).toEqual([]);
    expect(records.filter((record) => commandsRun(record) === 1).length).toBeGreaterThanOrEqual(
      SOAK_CALLS - waitingBefore,
    );
    // Every container that served a call is deleted.
    expect(harness.engine.live.filter((record) => commandsRun(record) > 0)).toEqual([]);
    // The pool never held more than its ceiling.
    expect(most).toBeLessThanOrEqual(CEILING);
    const warm = ids.filter((sandboxId) => logged(sandboxId)?.warm === true).length;
    expect(warm).toBeGreaterThan(0);
  }, 180_000);
});

/** Container creates the engine refused. */
function refused(): number {
  return harness.engine.records.filter((record) =>
    record.events.some((event) => event.event === "refused"),
  ).length;
}
