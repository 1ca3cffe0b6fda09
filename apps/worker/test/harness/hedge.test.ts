/**
 * Hedged starts against the real container plumbing: the built Worker in Miniflare, its
 * `TaskContainer` Durable Objects, containers served by the harness's engine, each call's own container
 * and its hedge held back by cold starts set per Durable Object. What a hedge promises is checked
 * on the engine's records: the command ran in exactly one container, the other never got it, and
 * every container of the call is deleted.
 */
import { errorBodySchema, execResultSchema, newSandboxId } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { hedgeName } from "../../src/hedge.ts";
import { type ContainerRecord, type Faults, isLive } from "./engine.ts";
import { commandsRun, WorkerHarness } from "./worker.ts";

/** The hedge delay the Worker is configured with. */
const HEDGE_AFTER_MS = 1_000;
let harness: WorkerHarness;

beforeAll(async () => {
  harness = await WorkerHarness.start({
    vars: { HEDGE_START_AFTER_MS: String(HEDGE_AFTER_MS) },
  });
}, 120_000);

afterEach(() => {
  expect(harness.engine.problems).toEqual([]);
});

afterAll(async () => {
  try {
    const deadline = Date.now() + 30_000;
    while (harness.engine.live.length > 0 && Date.now() < deadline) await sleep(100);
    expect(harness.engine.live.map((r) => r.name)).toEqual([]);
    for (const record of harness.engine.records) {
      expect(commandsRun(record), record.name).toBeLessThanOrEqual(1);
    }
  } finally {
    await harness?.close();
  }
}, 60_000);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A call whose own container and hedge start as `own` and `hedge` say. */
async function hedgedCall(own: Faults, hedge: Faults, timeoutSeconds = 30) {
  const sandboxId = newSandboxId("harness");
  const hedgeId = await harness.durableObjectId(await hedgeName(sandboxId));
  harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), own);
  harness.engine.faultsFor.set(hedgeId, hedge);
  const hedgesBefore = (await harness.health()).warmPool?.hedges ?? 0;
  const answer = await harness.exec({
    sandboxId,
    command: "echo ran; hostname",
    timeoutSeconds,
  });
  const hedges = ((await harness.health()).warmPool?.hedges ?? 0) - hedgesBefore;
  const containers = async () => ({
    own: await harness.containersOf(sandboxId),
    hedge: harness.engine.records.filter((record) => record.durableObjectId === hedgeId),
  });
  return { sandboxId, answer, hedges, containers };
}

/** Waits until none of `records()` is left running, and returns them. */
async function allDeleted(
  records: () => Promise<{ own: ContainerRecord[]; hedge: ContainerRecord[] }>,
) {
  await expect
    .poll(
      async () => {
        const { own, hedge } = await records();
        return [...own, ...hedge].filter(isLive).length;
      },
      { timeout: 30_000 },
    )
    .toBe(0);
  return records();
}

const ran = (records: ContainerRecord[]) =>
  records.reduce((sum, record) => sum + commandsRun(record), 0);

describe("hedged container starts", () => {
  it("runs the call in its own container when that is ready first, and destroys the hedge", async () => {
    const call = await hedgedCall({ coldStartMs: 1_500 }, { coldStartMs: 10_000 });
    expect(call.answer.status, call.answer.text).toBe(200);
    expect(execResultSchema.parse(JSON.parse(call.answer.text)).code).toBe(0);
    expect(call.hedges).toBe(1);
    const { own, hedge } = await allDeleted(call.containers);
    expect(ran(own)).toBe(1);
    expect(ran(hedge)).toBe(0);
  });

  it("runs the call in the hedge when that is ready first, without waiting for its own", async () => {
    const call = await hedgedCall({ coldStartMs: 20_000 }, {});
    expect(call.answer.status, call.answer.text).toBe(200);
    expect(execResultSchema.parse(JSON.parse(call.answer.text)).stdout).toMatch(/^ran\n/);
    // The hedge started after 1 s and ran the command; the own start (20 s) ran nothing.
    expect(call.hedges).toBe(1);
    const { own, hedge } = await allDeleted(call.containers);
    expect(ran(hedge)).toBe(1);
    expect(ran(own)).toBe(0);
  });

  it("runs the command once when both come up at about the same time, and destroys the other", async () => {
    const call = await hedgedCall({ coldStartMs: 1_600 }, { coldStartMs: 300 });
    expect(call.answer.status, call.answer.text).toBe(200);
    expect(call.hedges).toBe(1);
    const { own, hedge } = await allDeleted(call.containers);
    expect(ran(own) + ran(hedge)).toBe(1);
    // Both were started (the hedge 1 s into the call).
    expect(own.length).toBeGreaterThan(0);
    expect(hedge.length).toBeGreaterThan(0);
  });

  it("answers a clear error when neither comes up, and leaves nothing running", async () => {
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const call = await hedgedCall({ startGate: gate }, { startGate: gate }, 4);
    // Only now may the containers come up (and be deleted).
    release();
    expect(call.answer.status, call.answer.text).toBe(502);
    const body = errorBodySchema.parse(JSON.parse(call.answer.text));
    expect(body).toMatchObject({ code: "sandbox_error" });
    expect(body.error).toContain("did not become ready within the call's timeout (4 s)");
    expect(call.hedges).toBe(1);
    const { own, hedge } = await allDeleted(call.containers);
    expect(ran(own) + ran(hedge)).toBe(0);
    expect(hedge.length).toBeGreaterThan(0);
  });

  it("does not hedge a start that failed: the error comes at once", async () => {
    const call = await hedgedCall({ refuseCreate: true }, {});
    expect(call.answer.status, call.answer.text).toBe(502);
    // Failed before the hedge delay: no hedge was started.
    expect(call.hedges).toBe(0);
    const { hedge } = await allDeleted(call.containers);
    expect(hedge).toEqual([]);
  });

  it("destroys both containers when a /cancel reaches the Worker while the hedge runs the command", async () => {
    const sandboxId = newSandboxId("harness");
    const hedgeId = await harness.durableObjectId(await hedgeName(sandboxId));
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), { coldStartMs: 20_000 });
    const running = harness.exec({ sandboxId, command: "sleep 30", timeoutSeconds: 60 });
    await expect
      .poll(
        () =>
          harness.engine.records
            .filter((record) => record.durableObjectId === hedgeId)
            .reduce((sum, record) => sum + commandsRun(record), 0),
        { timeout: 15_000 },
      )
      .toBe(1);
    expect((await harness.cancel(sandboxId)).status).toBe(200);
    const answer = await running;
    expect(execResultSchema.parse(JSON.parse(answer.text)).outcome).toBe("cancelled");
    await expect
      .poll(
        async () =>
          [
            ...(await harness.containersOf(sandboxId)),
            ...harness.engine.records.filter((record) => record.durableObjectId === hedgeId),
          ].filter(isLive).length,
        { timeout: 30_000 },
      )
      .toBe(0);
  });
});
