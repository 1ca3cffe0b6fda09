import { createExecutionContext, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { CallStatus, ExecResult, HealthResponse } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import type { CallKeeperRpc } from "../src/config.js";
import worker from "../src/index.js";
import { fakeCommand } from "./fake-container.js";
import { AUTH, events, exec, sandboxId, sandboxState, send, workerEnv } from "./helpers.js";

const durableEnv = workerEnv({ DURABLE_CALLS: "true", KEPT_SECONDS: "600" });

/** A command that prints `first`, waits `ms`, prints `second` and exits 0. */
function slowCommand(ms: number): string {
  return fakeCommand({
    steps: [{ data: "first\n" }, { data: "second\n", delayMs: ms }],
  });
}

async function status(id: string, query = ""): Promise<CallStatus> {
  const answer = await send(`/exec/${id}${query}`, { headers: AUTH, env: durableEnv });
  expect(answer.status).toBe(200);
  return JSON.parse(answer.text) as CallStatus;
}

/** What the keeper's storage says of its call: started, finished or expired. */
function storedKind(keeper: DurableObjectStub<CallKeeperRpc>): Promise<string | undefined> {
  return runInDurableObject(keeper, (_, state) =>
    state.storage.get<{ kind: string }>("call").then((record) => record?.kind),
  );
}

describe("durable calls on the Worker (DURABLE_CALLS)", () => {
  it("reports what is kept in /health, and nothing while off", async () => {
    const on = await send("/health", { headers: AUTH, env: durableEnv });
    const health = JSON.parse(on.text) as HealthResponse;
    expect(health.durable).toMatchObject({
      keptSeconds: 600,
      maxKept: 1,
      disconnectGraceSeconds: 10,
    });
    const off = JSON.parse((await send("/health", { headers: AUTH })).text) as HealthResponse;
    expect(off.durable).toBeUndefined();
  });

  it("answers a detached call at once and gives its result to GET", async () => {
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: slowCommand(300), detach: true },
      { env: durableEnv },
    );
    expect(answer.status).toBe(202);
    expect(JSON.parse(answer.text)).toMatchObject({ sandboxId: id });
    const done = await status(id, "?waitSeconds=30");
    expect(done.state).toBe("finished");
    expect(done.result).toMatchObject({ stdout: "first\nsecond\n", code: 0 });
    expect((await sandboxState(id)).execs).toHaveLength(1);
  });

  it("attaches a repeated POST to the call in flight: one run, one result", async () => {
    const id = sandboxId();
    const body = { sandboxId: id, command: slowCommand(500) };
    const first = exec(body, { env: durableEnv });
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
    const second = await exec(body, { env: durableEnv });
    const firstAnswer = await first;
    expect(firstAnswer.status).toBe(200);
    expect(second.status).toBe(200);
    expect((JSON.parse(second.text) as ExecResult).stdout).toBe("first\nsecond\n");
    // Afterwards too: the kept result, not a second run.
    const third = await exec(body, { env: durableEnv });
    expect((JSON.parse(third.text) as ExecResult).stdout).toBe("first\nsecond\n");
    expect((await sandboxState(id)).execs).toHaveLength(1);
  });

  it("refuses a second run of an id whose call used another command", async () => {
    const id = sandboxId();
    await exec({ sandboxId: id, command: "echo one" }, { env: durableEnv });
    const other = await exec({ sandboxId: id, command: "echo two" }, { env: durableEnv });
    expect(other.status).toBe(409);
    expect((await sandboxState(id)).execs).toHaveLength(1);
  });

  it("re-attaches an event stream from byte offsets", async () => {
    const id = sandboxId();
    await exec({ sandboxId: id, command: slowCommand(300), detach: true }, { env: durableEnv });
    const answer = await send(`/exec/${id}?stdoutFrom=6`, {
      headers: { ...AUTH, accept: "text/event-stream" },
      env: durableEnv,
    });
    const received = await events(answer.text);
    const stdout = received
      .flatMap((event) => (event.type === "stdout" ? [event.data] : []))
      .join("");
    expect(stdout).toBe("second\n");
    expect(received.at(-1)).toMatchObject({ type: "exit", result: { code: 0 } });
  });

  /** Sends a 1 s call without `detach` and drops its caller once it runs; its final status. */
  async function dropCaller(bindings: typeof durableEnv): Promise<CallStatus> {
    const id = sandboxId();
    const controller = new AbortController();
    const request = new Request("https://bridge.test/exec", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id, command: slowCommand(1_000) }),
      signal: controller.signal,
    });
    const pending = worker
      .fetch(request, bindings, createExecutionContext())
      .then((response) => response.text())
      .catch((error: unknown) => error);
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
    controller.abort();
    await pending;
    const answer = await send(`/exec/${id}?waitSeconds=30`, { headers: AUTH, env: bindings });
    return JSON.parse(answer.text) as CallStatus;
  }

  it("keeps a call whose caller left running for the grace, and re-attaches to it", async () => {
    const done = await dropCaller(durableEnv);
    expect(done.state).toBe("finished");
    expect(done.result).toMatchObject({ stdout: "first\nsecond\n", outcome: "exited" });
  });

  it("cancels a call whose caller left when there is no grace", async () => {
    const done = await dropCaller(
      workerEnv({ DURABLE_CALLS: "true", DISCONNECT_GRACE_SECONDS: "0" }),
    );
    expect(done.state).toBe("finished");
    expect(done.result).toMatchObject({ outcome: "cancelled" });
  });

  it("answers expired once the TTL's alarm ran, and never runs the id again", async () => {
    const id = sandboxId();
    await exec({ sandboxId: id, command: "echo kept" }, { env: durableEnv });
    const keeper = env.CallKeeper.get(env.CallKeeper.idFromName(id));
    // The outcome is in the object's storage (its alarm set for the TTL's end).
    await expect.poll(() => storedKind(keeper)).toBe("finished");
    expect((await status(id)).keptForSeconds).toBeGreaterThan(500);
    expect(await runDurableObjectAlarm(keeper)).toBe(true);
    expect((await status(id)).state).toBe("expired");
    const again = await exec({ sandboxId: id, command: "echo kept" }, { env: durableEnv });
    expect(again.status).toBe(409);
    expect((await sandboxState(id)).execs).toHaveLength(1);
  });

  it("answers from storage once the object lost its memory, never running the call again", async () => {
    const id = sandboxId();
    await exec({ sandboxId: id, command: "echo stored" }, { env: durableEnv });
    const keeper = env.CallKeeper.get(env.CallKeeper.idFromName(id));
    await expect.poll(() => storedKind(keeper)).toBe("finished");
    // Resets the object as an eviction or a restart would: its memory (the bridge) is gone.
    await runInDurableObject(keeper, (_, state) => state.abort("keeper reset by test")).catch(
      () => {},
    );
    const done = await status(id);
    expect(done).toMatchObject({ state: "finished", result: { stdout: "stored\n", code: 0 } });
    const again = await exec({ sandboxId: id, command: "echo stored" }, { env: durableEnv });
    expect(JSON.parse(again.text)).toMatchObject({ stdout: "stored\n" });
    const stream = await send(`/exec/${id}?stdoutFrom=2`, {
      headers: { ...AUTH, accept: "text/event-stream" },
      env: durableEnv,
    });
    expect((await events(stream.text)).map((event) => event.type)).toEqual([
      "start",
      "stdout",
      "exit",
    ]);
    expect((await events(stream.text))[1]).toMatchObject({ data: "ored\n" });
    expect((await sandboxState(id)).execs).toHaveLength(1);
  });

  it("cancels a detached call through its keeper", async () => {
    const id = sandboxId();
    const body = { sandboxId: id, command: fakeCommand({ hang: true }), detach: true };
    expect((await exec(body, { env: durableEnv })).status).toBe(202);
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
    const cancel = await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      env: durableEnv,
    });
    expect(JSON.parse(cancel.text)).toMatchObject({ ok: true, cancelled: true });
    const done = await status(id, "?waitSeconds=30");
    expect(done).toMatchObject({ state: "finished", result: { outcome: "cancelled" } });
    expect((await sandboxState(id)).destroyed).toBe(true);
  });
});

describe("durable calls on the Worker: which instance answers", () => {
  it("answers unknown for an id never sent, from its keeper, which knows its id for a day", async () => {
    const unknown = await status(sandboxId());
    expect(unknown).toMatchObject({ state: "unknown", rememberedSeconds: 86_400 });
    expect(unknown.instance).toMatch(/^[0-9a-f]{64}$/);
  });

  it("names the call's keeper as the instance of each status, whatever isolate answers", async () => {
    const id = sandboxId();
    const keeper = env.CallKeeper.get(env.CallKeeper.idFromName(id));
    const started = await exec(
      { sandboxId: id, command: slowCommand(50), detach: true },
      { env: durableEnv },
    );
    expect(JSON.parse(started.text)).toMatchObject({ instance: keeper.id.toString() });
    const done = await status(id, "?waitSeconds=30");
    expect(done).toMatchObject({ state: "finished", instance: keeper.id.toString() });
    const health = JSON.parse((await send("/health", { headers: AUTH, env: durableEnv })).text);
    expect(typeof (health as HealthResponse).instance).toBe("string");
  });
});
