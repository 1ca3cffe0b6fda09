/**
 * The Worker bundle against the real container plumbing: its `TaskContainer` Durable Object and
 * workerd's container client (start, exec, destroy), with containers served by the harness's fake
 * engine (test/harness/engine.ts), whose faults (slow or refused starts, containers that die)
 * a real engine cannot produce on demand. podman.test.ts runs the same Worker on real containers.
 * Nothing here talks to a fake Durable Object.
 */
import { readStreamEvents } from "@remote-task/bridge/testing";
import {
  errorBodySchema,
  execResultSchema,
  newSandboxId,
  type StreamEvent,
} from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ContainerRecord, isLive } from "./engine.ts";
import { peakRssGrowth, processesWith } from "./proc.ts";
import { type Answer, commandsRun, TOKEN, WorkerHarness } from "./worker.ts";

let harness: WorkerHarness;
/**
 * Growth of workerd's resident memory allowed while 200 MB of output passes through: 80% of the
 * output. Buffering it anywhere (the Worker or the Durable Object) would cost all of it and more.
 */
const MEMORY_BOUND_BYTES = 160_000_000;

beforeAll(async () => {
  harness = await WorkerHarness.start({
    // Quick heartbeats, so a disconnected SSE client is noticed within a second. One start per
    // call: these tests hold a call's own start back; hedged starts have tests of their own.
    vars: { HEARTBEAT_INTERVAL_MS: "1000", HEDGE_START_AFTER_MS: "off" },
  });
}, 120_000);

afterEach(() => {
  // Nothing the engine or the container server did not know was asked of them.
  expect(harness.engine.problems).toEqual([]);
});

afterAll(async () => {
  try {
    // Destroy on every path: every container any test created is deleted, none served two calls.
    const deadline = Date.now() + 15_000;
    while (harness.engine.live.length > 0 && Date.now() < deadline) await sleep(100);
    expect(harness.engine.live.map((r) => r.name)).toEqual([]);
    for (const record of harness.engine.records) {
      expect(commandsRun(record), record.name).toBeLessThanOrEqual(1);
    }
    expect(harness.engine.records.length).toBeGreaterThan(20);
  } finally {
    await harness?.close();
  }
}, 60_000);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function id(): string {
  return newSandboxId("harness");
}

function result(answer: Answer) {
  expect(answer.status, answer.text).toBe(200);
  return execResultSchema.parse(JSON.parse(answer.text));
}

function events(answer: Answer): Promise<StreamEvent[]> {
  return readStreamEvents(new Response(answer.text)).all();
}

/** Waits until no container of `sandboxId` is left running; returns them all. */
async function destroyed(sandboxId: string, timeout = 10_000): Promise<ContainerRecord[]> {
  await expect
    .poll(async () => (await harness.containersOf(sandboxId)).filter(isLive).length, {
      timeout,
    })
    .toBe(0);
  return harness.containersOf(sandboxId);
}

describe("the Worker with its real TaskContainer Durable Object", () => {
  it("returns exit codes and keeps stdout and stderr apart, in a fresh container per call", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({ sandboxId, command: "echo out; echo err >&2; exit 3" }),
    );
    expect(answer).toMatchObject({ stdout: "out\n", stderr: "err\n", code: 3, outcome: "exited" });
    const ok = result(await harness.exec({ sandboxId: id(), command: "true" }));
    expect(ok).toMatchObject({ stdout: "", stderr: "", code: 0, outcome: "exited" });
    const containers = await destroyed(sandboxId);
    expect(containers).toHaveLength(1);
    expect(containers[0]?.events.map((e) => e.event)).toEqual(
      expect.arrayContaining(["create", "start", "running", "delete", "exit"]),
    );
  });

  it("runs in /workspace by default, or in the cwd asked for, with the env given", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({ sandboxId, command: 'pwd; echo "$GREETING"', env: { GREETING: "hi" } }),
    );
    expect(answer.stdout).toBe("/workspace\nhi\n");
    const inTmp = result(await harness.exec({ sandboxId: id(), command: "pwd", cwd: "/tmp" }));
    expect(inTmp.stdout).toBe("/tmp\n");
    await destroyed(sandboxId);
  });

  it("kills a command at its deadline: outcome timeout, container deleted, no process left", async () => {
    const sandboxId = id();
    const marker = `deadline-${sandboxId.slice(-12)}`;
    const answer = result(
      await harness.exec({
        sandboxId,
        command: `echo started; sleep 30 # ${marker}`,
        timeoutSeconds: 3,
      }),
    );
    expect(answer).toMatchObject({ outcome: "timeout", code: 124, stdout: "started\n" });
    await destroyed(sandboxId);
    expect(processesWith(marker)).toEqual([]);
  });

  it("streams over SSE with the same result", async () => {
    const sandboxId = id();
    const stream = await events(
      await harness.exec({ sandboxId, command: "echo a; echo b >&2; exit 7" }, { stream: true }),
    );
    expect(stream[0]).toMatchObject({ type: "start", sandboxId });
    expect(stream.at(-1)).toMatchObject({
      type: "exit",
      result: { stdout: "a\n", stderr: "b\n", code: 7 },
    });
    await destroyed(sandboxId);
  });

  it("answers capacity errors with 503 capacity_exceeded and Retry-After", async () => {
    const sandboxId = id();
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), { noInstance: true });
    const answer = await harness.exec({ sandboxId, command: "echo never", timeoutSeconds: 6 });
    expect(answer.status, answer.text).toBe(503);
    expect(errorBodySchema.parse(JSON.parse(answer.text)).code).toBe("capacity_exceeded");
    expect(Number(answer.headers.get("retry-after"))).toBeGreaterThan(0);
    const containers = await destroyed(sandboxId);
    expect(containers.length).toBeGreaterThan(0);
    expect(containers.every((record) => commandsRun(record) === 0)).toBe(true);
  });
});

/** Waits until a container of `sandboxId` has received the command. */
async function commandSent(sandboxId: string): Promise<ContainerRecord> {
  let found: ContainerRecord | undefined;
  await expect
    .poll(
      async () => {
        found = (await harness.containersOf(sandboxId)).find((r) => commandsRun(r) > 0);
        return found !== undefined;
      },
      { timeout: 15_000 },
    )
    .toBe(true);
  return found as ContainerRecord;
}

/** The bridge's log line for the call on `sandboxId`. */
function logged(sandboxId: string): Record<string, unknown> | undefined {
  return harness
    .bridgeLog()
    .find((entry) => entry.event === "exec" && entry.sandboxId === sandboxId);
}

describe("what a task sees, through the real Durable Object", () => {
  it("gets the local backend's environment: PATH, HOME, LANG, TMPDIR and its env, nothing of the container's", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({ sandboxId, command: "env", env: { GIVEN: "given" } }),
    );
    const variables = Object.fromEntries(
      answer.stdout
        .trim()
        .split("\n")
        .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
    );
    // bash itself sets PWD, SHLVL and _.
    expect(Object.keys(variables).sort()).toEqual(
      ["GIVEN", "HOME", "LANG", "PATH", "PWD", "SHLVL", "TMPDIR", "_"].sort(),
    );
    expect(variables).toMatchObject({
      GIVEN: "given",
      HOME: "/workspace",
      LANG: "C.UTF-8",
      TMPDIR: "/tmp",
      PWD: "/workspace",
    });
    expect(answer.stdout).not.toContain("CLOUDFLARE_");
    await destroyed(sandboxId);
  });

  it("ends the call when the command's shell exits, killing what it left running", async () => {
    const sandboxId = id();
    const marker = `left-behind-${sandboxId.slice(-12)}`;
    const answer = await harness.exec({
      sandboxId,
      command: `(exec -a ${marker} sleep 40 &); echo done`,
      timeoutSeconds: 60,
    });
    // Ended by the shell's exit, not by the 60 s deadline.
    expect(result(answer)).toMatchObject({ stdout: "done\n", code: 0, outcome: "exited" });
    expect(processesWith(marker)).toEqual([]);
    await destroyed(sandboxId);
  });

  it("runs the command with bash, as every backend does (the conformance suite's bash check)", async () => {
    const sandboxId = id();
    const answer = await harness.exec({ sandboxId, command: "[[ a == a ]] && echo {x,y}" });
    expect(result(answer)).toMatchObject({ stdout: "x y\n", code: 0, outcome: "exited" });
    await destroyed(sandboxId);
  });

  it("answers a cwd that does not exist with 400 invalid_request naming it", async () => {
    const sandboxId = id();
    const answer = await harness.exec({ sandboxId, command: "pwd", cwd: "/no/such/dir" });
    expect(answer.status, answer.text).toBe(400);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("invalid_request");
    expect(body.error).toContain("cwd /no/such/dir is not a directory in the sandbox");
    expect(body.error).not.toContain("/bin/bash");
    expect(body.issues?.[0]?.path).toEqual(["cwd"]);
    await destroyed(sandboxId);
  });

  it("counts output bytes exactly as the command wrote them, binary included", async () => {
    // exec streams the command's bytes: 5 raw bytes count 5 (the JSON text shows each invalid
    // UTF-8 byte as U+FFFD).
    const sandboxId = id();
    const binary = result(
      await harness.exec({ sandboxId, command: "printf '\\377\\376\\000\\001\\002'" }),
    );
    expect(binary).toMatchObject({ stdout: "\ufffd\ufffd\u0000\u0001\u0002", stdoutBytes: 5 });
    const text = result(await harness.exec({ sandboxId: id(), command: "printf 'h\\303\\251'" }));
    expect(text).toMatchObject({ stdout: "hé", stdoutBytes: 3 });
    await destroyed(sandboxId);
  });
});

describe("calls that end early, through the real Durable Object", () => {
  it("cancels a running call with POST /cancel: cancelled, container deleted, no process left", async () => {
    const sandboxId = id();
    const marker = `cancel-${sandboxId.slice(-12)}`;
    const running = harness.exec({
      sandboxId,
      command: `echo started; sleep 30 # ${marker}`,
      timeoutSeconds: 60,
    });
    await commandSent(sandboxId);
    const cancel = await harness.cancel(sandboxId);
    expect(JSON.parse(cancel.text)).toEqual({ ok: true, sandboxId, cancelled: true });
    expect(result(await running)).toMatchObject({ outcome: "cancelled", code: 130 });
    await destroyed(sandboxId);
    expect(processesWith(marker)).toEqual([]);
  });

  it("ends an SSE call whose client disconnects by the next heartbeat and deletes its container", async () => {
    const sandboxId = id();
    const marker = `sse-gone-${sandboxId.slice(-12)}`;
    const controller = new AbortController();
    const response = await fetch(new URL("/exec", harness.url), {
      method: "POST",
      headers: {
        authorization: `Bearer ${TOKEN}`,
        "content-type": "application/json",
        accept: "text/event-stream",
      },
      body: JSON.stringify({ sandboxId, command: `sleep 30 # ${marker}`, timeoutSeconds: 60 }),
      signal: controller.signal,
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await commandSent(sandboxId);
    controller.abort();
    // The heartbeat interval is 1 s here: the next write fails and ends the call (not its 60 s
    // deadline).
    await expect.poll(() => logged(sandboxId)?.endedBy, { timeout: 30_000 }).toBe("disconnect");
    await destroyed(sandboxId, 30_000);
    expect(processesWith(marker)).toEqual([]);
  });

  it("ends a JSON call whose client disconnects at its deadline at the latest (workerd #4185)", async () => {
    const sandboxId = id();
    const marker = `json-gone-${sandboxId.slice(-12)}`;
    const controller = new AbortController();
    const pending = harness
      .exec(
        { sandboxId, command: `sleep 30 # ${marker}`, timeoutSeconds: 4 },
        { signal: controller.signal },
      )
      .catch(() => undefined);
    await commandSent(sandboxId);
    controller.abort();
    await pending;
    await destroyed(sandboxId, 8_000);
    expect(processesWith(marker)).toEqual([]);
    // workerd notices a JSON client's disconnect only when it writes the answer, so the call
    // runs to its deadline (README, How this is tested). Should this become "disconnect", the
    // platform has started noticing: update the README.
    await expect.poll(() => logged(sandboxId)?.endedBy).toBe("timeout");
  });

  it("ends the call when the container dies mid-command, not at its deadline", async () => {
    const sandboxId = id();
    const running = harness.exec({
      sandboxId,
      command: "echo started; sleep 30",
      timeoutSeconds: 60,
    });
    const record = await commandSent(sandboxId);
    await sleep(300);
    harness.engine.kill(record);
    const answer = await running;
    // The platform reports the command killed with its container (exit 137, as Docker does), or
    // the connection lost: either way the call ends now, with the output it had.
    if (answer.status === 200) {
      expect(result(answer)).toMatchObject({ code: 137, outcome: "exited", stdout: "started\n" });
    } else {
      expect(answer.status, answer.text).toBe(502);
      expect(errorBodySchema.parse(JSON.parse(answer.text)).code).toBe("sandbox_error");
    }
    await destroyed(sandboxId);
  });
});

describe("container starts, through the real Durable Object", () => {
  it("waits out a slow (cold) start and runs the command once", async () => {
    const sandboxId = id();
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), { coldStartMs: 2_000 });
    const answer = await harness.exec({ sandboxId, command: "echo warm", timeoutSeconds: 30 });
    expect(result(answer)).toMatchObject({ stdout: "warm\n", code: 0 });
    const containers = await destroyed(sandboxId);
    expect(containers).toHaveLength(1);
    expect(commandsRun(containers[0] as ContainerRecord)).toBe(1);
  });

  it("answers sandbox_error, not a timeout, when the container cannot be created", async () => {
    const sandboxId = id();
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), { refuseCreate: true });
    const answer = await harness.exec({ sandboxId, command: "echo never", timeoutSeconds: 10 });
    expect(answer.status, answer.text).toBe(502);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("sandbox_error");
    expect(body.error).toContain("did not run");
    await destroyed(sandboxId);
  });

  it("answers sandbox_error before the deadline when the container never comes up", async () => {
    const sandboxId = id();
    let release = () => {};
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), {
      startGate: new Promise<void>((resolve) => {
        release = resolve;
      }),
    });
    const answer = await harness.exec({ sandboxId, command: "echo never", timeoutSeconds: 3 });
    // Only now may the container come up (and be deleted).
    release();
    expect(answer.status, answer.text).toBe(502);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body).toMatchObject({ code: "sandbox_error" });
    expect(body.error).toContain("did not become ready within the call's timeout (3 s)");
    const containers = await destroyed(sandboxId);
    expect(containers.every((record) => commandsRun(record) === 0)).toBe(true);
  });

  it("leaves no container behind and runs nothing when the timeout ends a slow start", async () => {
    // A 3 s cold start and a 2 s timeout: the container comes up after the call has ended.
    const sandboxId = id();
    harness.engine.faultsFor.set(await harness.durableObjectId(sandboxId), { coldStartMs: 3_000 });
    const answer = await harness.exec({
      sandboxId,
      command: "echo ran > /workspace/ran",
      timeoutSeconds: 2,
    });
    expect(answer.status, answer.text).toBe(502);
    // Past the late start: every container of this call is deleted and none got the command.
    await sleep(3_000);
    const containers = await destroyed(sandboxId, 15_000);
    expect(containers.length).toBeGreaterThan(0);
    expect(containers.every((record) => commandsRun(record) === 0)).toBe(true);
  });
});

describe("load through the real Durable Object", () => {
  it("counts 200 MB of output exactly, keeps its tail, and holds workerd's memory below the output's size", async () => {
    const sandboxId = id();
    // Twice the 100 MB asked for, so that the memory bound tells streaming from buffering with
    // room to spare (workerd's heaps grow to a working size after a warm-up).
    const bytes = 200_000_000;
    const line = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abc";
    const command = (size: number) => `yes ${line} | head -c ${size}`;
    // Warm up: the first large call grows workerd's heaps to their working size.
    result(
      await harness.exec({ sandboxId: id(), command: command(bytes / 4), timeoutSeconds: 120 }),
    );
    const { value: answer, growthBytes } = await peakRssGrowth(harness.workerdPid(), () =>
      harness.exec({ sandboxId, command: command(bytes), timeoutSeconds: 120 }),
    );
    const body = result(answer);
    expect(body).toMatchObject({ code: 0, stdoutBytes: bytes, stdoutTruncated: true });
    // The default cap keeps the last 1 MiB; the output's last line is whole.
    expect(Buffer.byteLength(body.stdout)).toBeLessThanOrEqual(1024 * 1024);
    expect(body.stdout.endsWith(`${line}\n`)).toBe(true);
    expect(growthBytes).toBeLessThan(MEMORY_BOUND_BYTES);
    await destroyed(sandboxId);
  }, 120_000);

  it("runs 20 calls in parallel, each in a container of its own", async () => {
    const ids = Array.from({ length: 20 }, () => id());
    const answers = await Promise.all(
      ids.map((sandboxId, i) =>
        harness.exec({ sandboxId, command: `echo ${i}; sleep 0.5`, timeoutSeconds: 60 }),
      ),
    );
    answers.forEach((answer, i) => {
      expect(result(answer)).toMatchObject({ stdout: `${i}\n`, code: 0 });
    });
    const containers = (await Promise.all(ids.map((sandboxId) => destroyed(sandboxId)))).flat();
    expect(containers).toHaveLength(20);
    expect(new Set(containers.map((record) => record.durableObjectId)).size).toBe(20);
    expect(containers.every((record) => commandsRun(record) === 1)).toBe(true);
  }, 120_000);
});
