/**
 * The warm pool in workerd: the real shard class (with test hooks, test/fake-warm-pool.ts) lending
 * fake containers (test/fake-sandbox.ts) to the real backend. Timing-heavy behaviour (cold starts,
 * exhaustion, refill failures, a soak) is tested against the container harness instead.
 */
import { env } from "cloudflare:workers";
import type { RunningCommand } from "@remote-task/bridge";
import { execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { CloudflareSandboxBackend } from "../src/cloudflare-backend.js";
import { readConfig, type WorkerEnv } from "../src/config.js";
import { shareOf } from "../src/warm-pool.js";
import { WarmPoolClient } from "../src/warm-pool-client.js";
import { type FakeScenario, fakeCommand } from "./fake-container.js";
import type { PoolVariables, ShardRow } from "./fake-warm-pool.js";
import {
  AUTH,
  exec,
  fakeNamespace,
  loggingWorker,
  sandboxId,
  sandboxState,
  send,
  warmPoolNamespace,
} from "./helpers.js";

let versions = 0;

/** A pool of `target` with a version of its own, so earlier tests' containers drain away. */
async function pool(target: number, extra: Partial<PoolVariables> = {}) {
  const variables: PoolVariables = {
    WARM_POOL_TARGET: String(target),
    MAX_INSTANCES: String(Math.max(2, target * 2)),
    version: `test-${++versions}`,
    ...extra,
  };
  const bindings: WorkerEnv = {
    ...env,
    ...variables,
    WarmPool: warmPoolNamespace(),
    CF_VERSION_METADATA: { id: variables.version, tag: "", timestamp: new Date(0).toISOString() },
  };
  const config = readConfig(bindings).warmPool;
  const shards = Array.from({ length: Math.max(1, config.shards) }, (_, index) =>
    env.WarmPool.get(env.WarmPool.idFromName(`warm-pool-shard-${index}`)),
  );
  for (const shard of shards) await shard.setVariables(variables);
  const client = new WarmPoolClient(warmPoolNamespace(), config, variables.version);
  await client.prime();
  return { client, shards, bindings, variables, config };
}

/** Waits until the pool has `ready` containers ready and none starting. */
async function filled(client: WarmPoolClient, ready: number): Promise<void> {
  await expect
    .poll(async () => client.stats(), { timeout: 10_000, interval: 20 })
    .toMatchObject({ ready, starting: 0 });
}

async function rows(shards: Array<{ rows(): Promise<ShardRow[]> }>): Promise<ShardRow[]> {
  return (await Promise.all(shards.map((shard) => shard.rows()))).flat();
}

function backend(client: WarmPoolClient | undefined) {
  return new CloudflareSandboxBackend({ namespace: env.TaskContainer, warmPool: client });
}

function spec(command: string) {
  const controller = new AbortController();
  return {
    sandboxId: sandboxId(),
    command,
    cwd: "/workspace",
    env: {},
    timeoutMs: 5_000,
    signal: controller.signal,
    controller,
  };
}

async function drain(running: RunningCommand): Promise<string> {
  let text = "";
  for await (const chunk of running.output) {
    text += typeof chunk.data === "string" ? chunk.data : new TextDecoder().decode(chunk.data);
  }
  await running.exit.catch(() => {});
  return text;
}

afterAll(async () => {
  // The last pool is emptied, and every container any shard started was destroyed once used or
  // given up on: none is left running.
  await pool(0);
  const shards = [0, 1].map((index) =>
    env.WarmPool.get(env.WarmPool.idFromName(`warm-pool-shard-${index}`)),
  );
  // A pool of 0 has no shard of its own to wake: the old ones are woken to drain.
  for (const [index, shard] of shards.entries()) await shard.stats(index);
  const deadline = Date.now() + 10_000;
  while ((await rows(shards)).length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  expect(await rows(shards)).toEqual([]);
});

describe("the warm pool", () => {
  it("spreads its target over its shards", () => {
    expect([0, 1, 2].map((index) => shareOf(17, 3, index))).toEqual([6, 6, 5]);
    expect(shareOf(8, 1, 0)).toBe(8);
    expect(shareOf(8, 1, 1)).toBe(0);
  });

  it("lends a call a container started before it, destroys it after the call, and never lends it again", async () => {
    const { client, shards } = await pool(2);
    await filled(client, 2);
    const before = (await rows(shards)).filter((row) => row.state === "ready");
    // Started by the shard to be destroyed by its own object 2 min after the pool would recycle
    // it (10 min by default).
    for (const row of before) {
      const alarm = await fakeNamespace().get(fakeNamespace().idFromName(row.name)).alarmAt();
      expect((alarm ?? 0) - Date.now()).toBeGreaterThan(600_000);
      expect((alarm ?? 0) - Date.now()).toBeLessThanOrEqual(720_000);
    }
    const claims = (await shards[0]?.stats(0))?.claims ?? Number.NaN;
    const b = backend(client);
    const s = spec("pwd");
    const running = await b.start(s);
    expect(running.warm).toBe(true);
    expect(await drain(running)).toBe("/workspace\n");
    const lent = (await rows(shards)).find((row) => row.sandboxId === s.sandboxId);
    expect(lent).toMatchObject({ state: "claimed" });
    await b.destroy(s.sandboxId);
    const name = lent?.name as string;
    const used = await fakeNamespace().get(fakeNamespace().idFromName(name)).fakeState();
    expect(used.execs.map((e) => e.command)).toEqual(["pwd"]);
    expect(used.destroyed).toBe(true);
    // The call's own sandbox id was never used.
    expect((await sandboxState(s.sandboxId)).execs).toEqual([]);
    // The shard forgot it and started another in its place.
    await filled(client, 2);
    const after = await rows(shards);
    expect(after.map((row) => row.name)).not.toContain(name);
    expect(before.map((row) => row.name)).toContain(name);
    expect(after.filter((row) => row.state === "ready")).toHaveLength(2);
    expect((await shards[0]?.stats(0))?.claims).toBe(claims + 1);
  });

  it("runs the call cold when the container it claimed is dead, and never sends it the command", async () => {
    const { client, shards } = await pool(1);
    await filled(client, 1);
    const [dead] = (await rows(shards)).filter((row) => row.state === "ready");
    const deadSandbox = fakeNamespace().get(fakeNamespace().idFromName(dead?.name as string));
    await deadSandbox.kill();
    const b = backend(client);
    const s = spec("echo cold");
    const running = await b.start(s);
    expect(running.warm).toBe(false);
    expect(await drain(running)).toBe("cold\n");
    await b.destroy(s.sandboxId);
    expect((await sandboxState(s.sandboxId)).execs.map((e) => e.command)).toEqual(["echo cold"]);
    // The dead one got nothing, and its shard destroyed it and started another.
    await filled(client, 1);
    const state = await deadSandbox.fakeState();
    expect(state.execs).toEqual([]);
    expect(state.destroyed).toBe(true);
    expect((await rows(shards)).map((row) => row.name)).not.toContain(dead?.name);
  });

  it("destroys the warm container of a call when its /cancel reaches another isolate", async () => {
    const { client, config, variables } = await pool(1);
    await filled(client, 1);
    const here = backend(client);
    const elsewhere = backend(new WarmPoolClient(warmPoolNamespace(), config, variables.version));
    const s = spec(fakeCommand({ steps: [{ data: "started\n" }], hang: true } as FakeScenario));
    const running = await here.start(s);
    expect(running.warm).toBe(true);
    const reading = drain(running);
    // The other isolate knows nothing of the call: it asks the shards whose container it is.
    await elsewhere.destroy(s.sandboxId);
    await expect(running.exit).rejects.toThrow();
    await reading;
    await here.destroy(s.sandboxId);
    expect((await sandboxState(s.sandboxId)).execs).toEqual([]);
  });

  it("destroys the container lent to a call that ended while claiming it, and touches nothing else", async () => {
    const { client, shards } = await pool(1);
    await filled(client, 1);
    const [ready] = await rows(shards);
    const b = backend(client);
    const s = spec("echo never");
    const starting = b.start(s);
    s.controller.abort();
    await expect(starting).rejects.toThrow();
    await b.destroy(s.sandboxId);
    const lent = fakeNamespace().get(fakeNamespace().idFromName(ready?.name as string));
    expect(await lent.fakeState()).toMatchObject({ execs: [], destroyed: true });
    expect((await rows(shards)).map((row) => row.name)).not.toContain(ready?.name);
    // The call's own sandbox id was never used.
    expect(await sandboxState(s.sandboxId)).toMatchObject({ starts: [], execs: [] });
  });
});

describe("the warm pool: recycling old and stray containers", () => {
  it("replaces a container that idled past WARM_POOL_MAX_IDLE", async () => {
    const { client, shards } = await pool(1, { WARM_POOL_MAX_IDLE: "60" });
    await filled(client, 1);
    const [old] = await rows(shards);
    await shards[0]?.ageReady(61_000);
    await client.stats();
    await expect
      .poll(async () => (await rows(shards)).map((row) => row.name), { timeout: 10_000 })
      .not.toContain(old?.name);
    await filled(client, 1);
    const state = await fakeNamespace()
      .get(fakeNamespace().idFromName(old?.name as string))
      .fakeState();
    expect(state).toMatchObject({ execs: [], destroyed: true });
  });

  it("drains the containers of an older Worker version after a deploy, and lends none of them", async () => {
    const first = await pool(2);
    await filled(first.client, 2);
    const old = (await rows(first.shards)).map((row) => row.name);
    // The redeployed Worker: a new version id.
    const second = await pool(2);
    // A call of the old version gets nothing from the new one.
    expect(
      await first.client.claim(sandboxId(), 5_000, 1_000, new AbortController().signal),
    ).toBeUndefined();
    await filled(second.client, 2);
    await expect
      .poll(async () => (await rows(second.shards)).filter((row) => old.includes(row.name)), {
        timeout: 10_000,
      })
      .toEqual([]);
    for (const name of old) {
      const state = await fakeNamespace().get(fakeNamespace().idFromName(name)).fakeState();
      expect(state).toMatchObject({ execs: [], destroyed: true });
    }
    expect(
      (await rows(second.shards)).every((row) => row.version === second.variables.version),
    ).toBe(true);
  });

  it("destroys a container left half-started by a restart of its shard", async () => {
    const { client, shards, variables } = await pool(1);
    await filled(client, 1);
    const name = `warm-${crypto.randomUUID()}`;
    const left = fakeNamespace().get(fakeNamespace().idFromName(name));
    await left.start({ network: "none", budgetMs: 5_000, backstopMs: 60_000 });
    await shards[0]?.addStarting(name, variables.version);
    await client.stats();
    await expect
      .poll(async () => (await rows(shards)).map((row) => row.name), { timeout: 10_000 })
      .not.toContain(name);
    expect(await left.fakeState()).toMatchObject({ execs: [], destroyed: true });
    await filled(client, 1);
  });

  it("destroys a container lent to a call that is long over (its Worker died before destroying it)", async () => {
    const { client, shards } = await pool(1);
    await filled(client, 1);
    const claim = await client.claim(sandboxId(), 5_000, 0, new AbortController().signal);
    expect(claim).toBeDefined();
    await shards[0]?.expireClaims();
    await client.stats();
    await expect
      .poll(async () => (await rows(shards)).map((row) => row.name), { timeout: 10_000 })
      .not.toContain(claim?.name);
    const state = await fakeNamespace()
      .get(fakeNamespace().idFromName(claim?.name as string))
      .fakeState();
    expect(state.destroyed).toBe(true);
  });
});

describe("the warm pool: network policy and the Worker", () => {
  it("starts its containers with the default network policy and lends them only to calls with it", async () => {
    const { client, shards } = await pool(1);
    await filled(client, 1);
    const [ready] = (await rows(shards)).filter((row) => row.state === "ready");
    const pooled = await fakeNamespace()
      .get(fakeNamespace().idFromName(ready?.name as string))
      .fakeState();
    expect(pooled.starts).toMatchObject([{ enableInternet: false }]);
    const b = new CloudflareSandboxBackend({
      namespace: env.TaskContainer,
      warmPool: client,
      pooledNetwork: "none",
    });
    // A call asking for the internet starts its own container, with the internet on.
    const open = { ...spec("pwd"), network: "open" as const };
    const cold = await b.start(open);
    expect(cold.warm).toBe(false);
    await drain(cold);
    await b.destroy(open.sandboxId);
    expect((await sandboxState(open.sandboxId)).starts).toMatchObject([{ enableInternet: true }]);
    expect(await rows(shards)).toEqual([ready]);
    // A call with the pool's policy is lent the waiting container.
    const none = { ...spec("pwd"), network: "none" as const };
    const warm = await b.start(none);
    expect(warm.warm).toBe(true);
    await drain(warm);
    await b.destroy(none.sandboxId);
    expect((await sandboxState(none.sandboxId)).starts).toEqual([]);
  });

  it("never lends a call with secrets a pooled container, even one with its very policy", async () => {
    const allow = { allow: ["api.github.com"] };
    const { client, shards } = await pool(1, { NETWORK_DEFAULT: "api.github.com" });
    await filled(client, 1);
    const [ready] = (await rows(shards)).filter((row) => row.state === "ready");
    const b = new CloudflareSandboxBackend({
      namespace: env.TaskContainer,
      warmPool: client,
      pooledNetwork: allow,
    });
    const secret = {
      name: "GH_TOKEN",
      placeholder: "rt_secret_0123",
      value: "value-0123456789abcdef",
      patterns: [{ host: "api.github.com", port: undefined, literal: false }],
      header: undefined,
    };
    // The pooled container's gate was registered without the call's secrets: the call starts
    // its own, whose gate has them.
    const withSecrets = { ...spec("pwd"), network: allow, secrets: [secret] };
    const cold = await b.start(withSecrets);
    expect(cold.warm).toBe(false);
    await drain(cold);
    await b.destroy(withSecrets.sandboxId);
    const own = await sandboxState(withSecrets.sandboxId);
    expect(own.starts).toHaveLength(1);
    expect(own.intercepts).toEqual(["all-http", "https *"]);
    expect(await rows(shards)).toEqual([ready]);
    // The same policy without secrets is lent the waiting container.
    const plain = { ...spec("pwd"), network: allow };
    const warm = await b.start(plain);
    expect(warm.warm).toBe(true);
    await drain(warm);
    await b.destroy(plain.sandboxId);
  });

  it("through the Worker: with NETWORK_DEFAULT open the pool starts with the internet, and a call asking for none starts cold", async () => {
    const { client, shards, bindings } = await pool(1, { NETWORK_DEFAULT: "open" });
    await filled(client, 1);
    const [ready] = (await rows(shards)).filter((row) => row.state === "ready");
    const pooled = await fakeNamespace()
      .get(fakeNamespace().idFromName(ready?.name as string))
      .fakeState();
    expect(pooled.starts).toMatchObject([{ enableInternet: true }]);
    const { handler, entries } = loggingWorker();
    const none = sandboxId();
    const first = await exec(
      { sandboxId: none, command: "echo none", network: "none" },
      { env: bindings, handler },
    );
    expect(execResultSchema.parse(JSON.parse(first.text)).stdout).toBe("none\n");
    expect((await sandboxState(none)).starts).toMatchObject([{ enableInternet: false }]);
    const second = await exec(
      { sandboxId: sandboxId(), command: "echo open" },
      { env: bindings, handler },
    );
    expect(execResultSchema.parse(JSON.parse(second.text)).stdout).toBe("open\n");
    expect(entries.map((entry) => "warm" in entry && entry.warm)).toEqual([false, true]);
  });

  it("through the Worker: /health reports the pool and each call's log line says warm or cold", async () => {
    const { client, bindings } = await pool(2);
    const { handler, entries } = loggingWorker();
    const health = async () =>
      healthResponseSchema.parse(
        JSON.parse((await send("/health", { headers: AUTH, env: bindings, handler })).text),
      ).warmPool;
    /** What /health says of no pool, and of one that served nothing yet. */
    const none = {
      target: 0,
      ready: 0,
      starting: 0,
      waiting: 0,
      hits: 0,
      waits: 0,
      misses: 0,
      hedges: 0,
    };
    await expect.poll(health, { timeout: 10_000 }).toEqual({ ...none, target: 2, ready: 2 });
    const answer = await exec(
      { sandboxId: sandboxId(), command: "echo hi" },
      { env: bindings, handler },
    );
    expect(execResultSchema.parse(JSON.parse(answer.text)).stdout).toBe("hi\n");
    await filled(client, 2);
    expect(await health()).toEqual({ ...none, target: 2, ready: 2, hits: 1 });
    const off = await send("/health", { headers: AUTH });
    expect(healthResponseSchema.parse(JSON.parse(off.text)).warmPool).toEqual(none);
    await exec({ sandboxId: sandboxId(), command: "echo cold" }, { handler });
    expect(entries.map((entry) => "warm" in entry && entry.warm)).toEqual([true, false]);
  });
});

describe("a call that finds no container ready", () => {
  /** A full pool of one shard whose starts are held back from now on. */
  async function holding(target: number, maxInstances: number) {
    const p = await pool(target, { MAX_INSTANCES: String(maxInstances) });
    await filled(p.client, target);
    const shard = p.shards[0] as (typeof p.shards)[number];
    await shard.holdStarts();
    const claim = (waitMs: number, signal = new AbortController().signal, id = sandboxId()) =>
      p.client.claim(id, 5_000, waitMs, signal);
    const waiting = async () => (await shard.stats(0)).waiting;
    return { ...p, shard, claim, waiting };
  }

  afterEach(async () => {
    // Whatever a test held back starts now, and what it claimed (no call of its own destroys
    // it) counts as long over: the shard destroys both, so that nothing is left running.
    for (const index of [0, 1]) {
      const shard = env.WarmPool.get(env.WarmPool.idFromName(`warm-pool-shard-${index}`));
      await shard.releaseStarts();
      await shard.expireClaims();
      await shard.stats(index);
    }
  });

  it("waits for a start in flight instead of starting its own, and gets it once it is up", async () => {
    const { shard, shards, claim, waiting } = await holding(1, 20);
    expect(await claim(0)).toMatchObject({ waited: false });
    const id = sandboxId();
    const lent = claim(10_000, undefined, id);
    await expect.poll(waiting).toBe(1);
    await expect.poll(() => shard.heldStarts()).toBeGreaterThan(0);
    await shard.releaseStarts(1);
    const claimed = await lent;
    expect(claimed).toMatchObject({ waited: true, name: expect.stringMatching(/^warm-/) });
    expect((await rows(shards)).find((row) => row.name === claimed?.name)).toMatchObject({
      state: "claimed",
      sandboxId: id,
    });
    expect(await waiting()).toBe(0);
  });

  it("gives each waiting call a start of its own, and the first to finish to the call waiting longest", async () => {
    const { shard, shards, claim, waiting } = await holding(1, 20);
    await claim(0);
    const first = sandboxId();
    const second = sandboxId();
    const firstLent = claim(10_000, undefined, first);
    await expect.poll(waiting).toBe(1);
    const secondLent = claim(10_000, undefined, second);
    await expect.poll(waiting).toBe(2);
    await expect.poll(() => shard.heldStarts()).toBeGreaterThanOrEqual(2);
    await shard.releaseStarts(1);
    const one = await firstLent;
    expect(await waiting()).toBe(1);
    await shard.releaseStarts(1);
    const two = await secondLent;
    expect(one?.name).not.toBe(two?.name);
    const claimed = (await rows(shards)).filter((row) => row.state === "claimed");
    expect(claimed.find((row) => row.name === one?.name)?.sandboxId).toBe(first);
    expect(claimed.find((row) => row.name === two?.name)?.sandboxId).toBe(second);
  });

  it("answers at once, with nothing lent, when no start in flight is left to wait for (the pool at its ceiling)", async () => {
    // MAX_INSTANCES 2: a ceiling of one container, which the refill is starting.
    const { shard, claim, waiting } = await holding(1, 2);
    await claim(0);
    await expect.poll(() => shard.heldStarts()).toBe(1);
    const promised = claim(10_000);
    await expect.poll(waiting).toBe(1);
    // No start is left for this one: it starts its own.
    expect(await claim(10_000)).toBeUndefined();
    await shard.releaseStarts(1);
    expect(await promised).toMatchObject({ waited: true });
  });

  it("stops waiting when its call ends, and the container it would have had joins the pool", async () => {
    const { shard, shards, claim, waiting } = await holding(1, 20);
    await claim(0);
    const controller = new AbortController();
    const id = sandboxId();
    // A wait far longer than the test may take: only the withdrawal can end it in time.
    const lent = claim(600_000, controller.signal, id);
    await expect.poll(waiting).toBe(1);
    controller.abort();
    expect(await lent).toBeUndefined();
    expect(await waiting()).toBe(0);
    await shard.releaseStarts();
    await expect
      .poll(async () => (await rows(shards)).filter((row) => row.state === "ready").length)
      .toBeGreaterThan(0);
    expect((await rows(shards)).map((row) => row.sandboxId)).not.toContain(id);
  });

  it("stops waiting after the time the call gave it", async () => {
    const { claim, waiting } = await holding(1, 20);
    await claim(0);
    const lent = claim(300);
    await expect.poll(waiting).toBe(1);
    expect(await lent).toBeUndefined();
    expect(await waiting()).toBe(0);
  });
});
