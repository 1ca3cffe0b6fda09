import {
  type CallStatus,
  callStatusSchema,
  execResultSchema,
  healthResponseSchema,
} from "@remote-task/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { readStreamEvents } from "../src/testing/index.js";
import {
  eventually,
  expectError,
  freshId,
  request,
  setupBridge,
  shutdownBridges,
} from "./helpers.js";

afterEach(shutdownBridges);

const DURABLE = { durable: {} };

async function status(
  bridge: ReturnType<typeof setupBridge>["bridge"],
  sandboxId: string,
  query = "",
): Promise<CallStatus> {
  const response = await bridge(request(`/exec/${sandboxId}${query}`));
  expect(response.status).toBe(200);
  return callStatusSchema.parse(await response.json());
}

describe("durable calls", () => {
  it("answers a detached call at once and keeps its result for GET /exec/{id}", async () => {
    const { bridge, exec, backend } = setupBridge(DURABLE);
    const sandboxId = freshId();
    const response = await exec({ sandboxId, command: "sleep 0.2; echo kept", detach: true });
    expect(response.status).toBe(202);
    expect(callStatusSchema.parse(await response.json())).toMatchObject({
      sandboxId,
      state: "running",
    });
    const done = await status(bridge, sandboxId, "?waitSeconds=30");
    expect(done).toMatchObject({ state: "finished", result: { stdout: "kept\n", code: 0 } });
    expect(done.keptForSeconds).toBeGreaterThan(0);
    expect(backend.starts).toHaveLength(1);
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(health.durable).toMatchObject({ keptSeconds: 600, kept: 1, replay: "head" });
    expect(await status(bridge, freshId())).toMatchObject({ state: "unknown" });
  });

  it("never runs an id twice: a repeated POST attaches to the call or returns its result", async () => {
    const { exec, backend } = setupBridge(DURABLE);
    const sandboxId = freshId();
    const body = { sandboxId, command: "sleep 0.2; echo once" };
    const [first, second] = await Promise.all([exec(body), exec(body)]);
    for (const response of [first, second]) {
      expect(response.status).toBe(200);
      expect(execResultSchema.parse(await response.json()).stdout).toBe("once\n");
    }
    const third = await exec(body);
    expect(execResultSchema.parse(await third.json()).stdout).toBe("once\n");
    expect(backend.starts).toHaveLength(1);
    await expectError(await exec({ sandboxId, command: "echo other" }), "conflict");
  });

  it("names its instance in /health and each status; unknown says how far back it knows every id", async () => {
    const created = Date.now();
    const { bridge, exec } = setupBridge(DURABLE);
    const other = setupBridge(DURABLE).bridge;
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    const otherHealth = healthResponseSchema.parse(await (await other(request("/health"))).json());
    expect(health.instance).toMatch(/^[0-9a-f-]{36}$/);
    expect(otherHealth.instance).not.toBe(health.instance);
    const sandboxId = freshId();
    const detached = callStatusSchema.parse(
      await (await exec({ sandboxId, command: "echo hi", detach: true })).json(),
    );
    expect(detached.instance).toBe(health.instance);
    const finished = await status(bridge, sandboxId, "?waitSeconds=30");
    expect(finished).toMatchObject({ state: "finished", instance: health.instance });
    expect(finished.rememberedSeconds).toBeUndefined();
    const first = await status(bridge, freshId());
    expect(first).toMatchObject({ state: "unknown", instance: health.instance });
    const remembered = first.rememberedSeconds ?? -1;
    expect(remembered).toBeGreaterThanOrEqual(0);
    expect(remembered).toBeLessThanOrEqual((Date.now() - created) / 1000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const later = await status(bridge, freshId());
    expect(later.rememberedSeconds ?? -1).toBeGreaterThanOrEqual(remembered + 0.04);
  });

  it("takes the instance a host gives, and counts what it knows from its last forgotten id", async () => {
    const { bridge, exec } = setupBridge({
      durable: { keptSeconds: 0, maxKept: 1 },
      instance: "keeper-7",
    });
    // keptSeconds 0: each id is expired at once; past 1024 of them the oldest are forgotten.
    const full = await status(bridge, freshId());
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The first id is the one forgotten once 1024 more are expired: the bridge then knows every
    // id sent since it dropped that one, no longer every id since it started.
    const beforeFirst = Date.now();
    for (let index = 0; index < 1_025; index++) {
      expect((await exec({ command: "true" })).status).toBe(200);
    }
    const answer = await status(bridge, freshId());
    const window = (Date.now() - beforeFirst) / 1000;
    expect(answer.instance).toBe("keeper-7");
    expect(full.rememberedSeconds ?? -1).toBeGreaterThanOrEqual(0);
    expect(answer.rememberedSeconds ?? Infinity).toBeLessThanOrEqual(window);
    expect(() => setupBridge({ instance: "" })).toThrow(/instance/);
  });

  it("a request still on its way when the same one was sent again attaches to its call: one run", async () => {
    const { bridge, exec, backend } = setupBridge(DURABLE);
    const sandboxId = freshId();
    const text = JSON.stringify({ sandboxId, command: "sleep 0.2; echo late" });
    const bytes = new TextEncoder().encode(text);
    let rest: () => void = () => {};
    const slowBody = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(bytes.subarray(0, 10));
        rest = () => {
          controller.enqueue(bytes.subarray(10));
          controller.close();
        };
      },
    });
    const first = bridge(
      request("/exec", { raw: slowBody, headers: { "content-type": "application/json" } }),
    );
    // While the first is read, its id is unknown: the same request sent again runs the call.
    expect(await status(bridge, sandboxId)).toMatchObject({ state: "unknown" });
    const again = exec({ sandboxId, command: "sleep 0.2; echo late" });
    await eventually(() => backend.starts.length === 1, "the call sent again to start");
    rest();
    for (const response of [await first, await again]) {
      expect(response.status).toBe(200);
      expect(execResultSchema.parse(await response.json()).stdout).toBe("late\n");
    }
    expect(backend.starts).toHaveLength(1);
  });

  it("answers expired once the outcome's time is up, and refuses the id again", async () => {
    const { bridge, exec, backend } = setupBridge({ durable: { keptSeconds: 0.05 } });
    const sandboxId = freshId();
    await (await exec({ sandboxId, command: "echo soon-gone" })).json();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await status(bridge, sandboxId)).toMatchObject({ state: "expired" });
    await expectError(await exec({ sandboxId, command: "echo soon-gone" }), "conflict");
    expect(backend.starts).toHaveLength(1);
  });

  it("keeps a call whose caller left running for the grace, for a re-attach", async () => {
    const { bridge, exec } = setupBridge({ durable: { disconnectGraceSeconds: 30 } });
    const sandboxId = freshId();
    const controller = new AbortController();
    const answer = exec(
      { sandboxId, command: "sleep 0.3; echo survived" },
      { signal: controller.signal },
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort();
    await answer.catch(() => undefined);
    const done = await status(bridge, sandboxId, "?waitSeconds=30");
    expect(done).toMatchObject({
      state: "finished",
      result: { stdout: "survived\n", outcome: "exited" },
    });
  });

  it("gives a re-attached caller its call's result even when there is no room to keep it", async () => {
    const { bridge, exec } = setupBridge({ durable: { maxKept: 1, disconnectGraceSeconds: 30 } });
    // An unfetched detached outcome fills the table.
    await exec({ command: "echo first", detach: true });
    const sandboxId = freshId();
    const controller = new AbortController();
    const answer = exec(
      { sandboxId, command: "sleep 0.3; echo mine" },
      { signal: controller.signal },
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort();
    // Asked while the call runs (the in-process answer itself ends only with the call).
    const reattached = status(bridge, sandboxId, "?waitSeconds=30");
    await answer.catch(() => undefined);
    expect(await reattached).toMatchObject({ state: "finished", result: { stdout: "mine\n" } });
    expect(await status(bridge, sandboxId)).toMatchObject({ state: "expired" });
  });

  it("cancels a call whose caller left once the grace is over (0: at once)", async () => {
    const { bridge, exec } = setupBridge(DURABLE);
    const sandboxId = freshId();
    const controller = new AbortController();
    const answer = exec({ sandboxId, command: "sleep 30" }, { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort();
    await answer.catch(() => undefined);
    const done = await status(bridge, sandboxId, "?waitSeconds=30");
    expect(done).toMatchObject({ state: "finished", result: { outcome: "cancelled" } });
  });
});

describe("durable calls: streams and bounds", () => {
  it("re-attaches an event stream from byte offsets, then follows to the exit", async () => {
    const { bridge, exec } = setupBridge(DURABLE);
    const sandboxId = freshId();
    await exec({ sandboxId, command: "echo abcdef; sleep 0.3; echo later", detach: true });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const response = await bridge(request(`/exec/${sandboxId}?stdoutFrom=3`, { stream: true }));
    const events = await readStreamEvents(response).all();
    expect(events[0]).toMatchObject({ type: "start", sandboxId });
    const stdout = events.flatMap((event) => (event.type === "stdout" ? [event.data] : []));
    expect(stdout.join("")).toBe("def\nlater\n");
    expect(events.at(-1)).toMatchObject({ type: "exit", result: { stdout: "abcdef\nlater\n" } });
    // Once it ended: the retained tail from the offset.
    const again = await bridge(request(`/exec/${sandboxId}?stdoutFrom=7`, { stream: true }));
    const replay = await readStreamEvents(again).all();
    expect(replay.filter((event) => event.type === "stdout")).toEqual([
      { type: "stdout", data: "later\n" },
    ]);
  });

  it("refuses detached calls beyond the bound with 429 and Retry-After; cancel stops one", async () => {
    const { bridge, exec, backend } = setupBridge({ durable: { maxKept: 3 } });
    const ids = [freshId(), freshId(), freshId()];
    for (const sandboxId of ids) {
      expect((await exec({ sandboxId, command: "sleep 30", detach: true })).status).toBe(202);
    }
    const refused = await exec({ sandboxId: freshId(), command: "sleep 30", detach: true });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).not.toBeNull();
    expect(await refused.json()).toMatchObject({ code: "capacity_exceeded" });
    expect(backend.starts).toHaveLength(3);
    const cancel = await bridge(request("/cancel", { body: { sandboxId: ids[0] } }));
    expect(await cancel.json()).toMatchObject({ cancelled: true });
    expect(await status(bridge, ids[0] as string)).toMatchObject({
      state: "finished",
      result: { outcome: "cancelled" },
    });
    await bridge.shutdown();
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("holds a flood of detached calls to the byte bound: the rest are refused (429), nothing of theirs runs", async () => {
    const perCall = 1_024 + "sleep 30".length + 2 * 65_536;
    const { bridge, exec, backend } = setupBridge({
      limits: { maxOutputBytes: 65_536 },
      admission: { maxConcurrent: 256 },
      durable: { maxKeptBytes: 10 * perCall },
    });
    const answers = await Promise.all(
      Array.from({ length: 200 }, () => exec({ command: "sleep 30", detach: true })),
    );
    const statuses = answers.map((answer) => answer.status);
    expect(statuses.filter((status) => status === 202)).toHaveLength(10);
    expect(statuses.filter((status) => status === 429)).toHaveLength(190);
    expect(backend.starts).toHaveLength(10);
    const health = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(health.durable?.kept).toBe(10);
    expect(health.durable?.keptBytes).toBeLessThanOrEqual(10 * perCall);
  });

  it("keeps undelivered outcomes of detached calls until fetched: a flood beyond maxKept waits for them", async () => {
    const { bridge, exec } = setupBridge({ durable: { maxKept: 5 } });
    const ids = Array.from({ length: 5 }, () => freshId());
    for (const sandboxId of ids) {
      expect((await exec({ sandboxId, command: "echo hi", detach: true })).status).toBe(202);
    }
    for (const sandboxId of ids) await status(bridge, sandboxId, "?waitSeconds=30");
    // Fetched outcomes make room; unfetched ones would not.
    expect((await exec({ command: "echo hi", detach: true })).status).toBe(202);
    const { exec: execOther } = setupBridge({ durable: { maxKept: 1 } });
    expect((await execOther({ command: "echo one", detach: true })).status).toBe(202);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await execOther({ command: "echo two", detach: true })).status).toBe(429);
  });

  it("refuses an invalid id in the path with 400, and an invalid waitSeconds", async () => {
    const { bridge } = setupBridge(DURABLE);
    await expectError(await bridge(request("/exec/Not_Valid%ZZ")), "invalid_request");
    await expectError(
      await bridge(request(`/exec/${freshId()}?waitSeconds=soon`)),
      "invalid_request",
    );
  });

  it("refuses detach and has no GET /exec/{id} on a bridge without durable calls", async () => {
    const { bridge, exec } = setupBridge();
    await expectError(await exec({ command: "true", detach: true }), "invalid_request");
    expect((await bridge(request(`/exec/${freshId()}`))).status).toBe(404);
  });
});
