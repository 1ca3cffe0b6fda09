import {
  createExecutionContext,
  listDurableObjectIds,
  waitOnExecutionContext,
} from "cloudflare:test";
import { exports } from "cloudflare:workers";
import {
  errorBodySchema,
  execResultSchema,
  healthResponseSchema,
  PROTOCOL_VERSION,
} from "@remote-task/protocol";
import { referenceExecRequest, referenceExecResponse } from "@remote-task/protocol/fixtures";
import { afterAll, describe, expect, it } from "vitest";
import { fakeCommand } from "./fake-container.js";
import {
  AUTH,
  events,
  exec,
  expectDestroyed,
  fakeNamespace,
  loggingWorker,
  sandboxId,
  sandboxState,
  send,
  workerEnv,
} from "./helpers.js";

const MiB = 1024 * 1024;

afterAll(async () => {
  // Nothing left behind: every container any test in this file started had destroy() called.
  const ns = fakeNamespace();
  const ids = await listDurableObjectIds(ns);
  expect(ids.length).toBeGreaterThan(10);
  for (const id of ids) {
    const state = await ns.get(id).fakeState();
    if (state.starts.length === 0) continue;
    expect(state.destroyCalls, `sandbox ${id.toString()}`).toBeGreaterThanOrEqual(1);
  }
});

describe("the default Worker entry in workerd", () => {
  it("answers the reference request exactly as the reference bridge does", async () => {
    const answer = await exec({ ...referenceExecRequest });
    expect(answer.status).toBe(200);
    const body = execResultSchema.parse(JSON.parse(answer.text));
    expect({ stdout: body.stdout, stderr: body.stderr, code: body.code }).toEqual(
      referenceExecResponse,
    );
    expect(body).toMatchObject({ outcome: "exited", stdoutBytes: 11, stdoutTruncated: false });
    const state = await expectDestroyed(referenceExecRequest.sandboxId);
    expect(state.execs).toEqual([{ command: "pwd", cwd: "/workspace", envNames: [], env: {} }]);
  });

  it("is reachable through the runtime's own binding of the entry (exports.default)", async () => {
    const response = await exports.default.fetch("https://bridge.test/health", { headers: AUTH });
    expect(response.status).toBe(200);
    const health = healthResponseSchema.parse(await response.json());
    expect(health).toMatchObject({ ok: true, protocol: PROTOCOL_VERSION, backend: "cloudflare" });
    expect(health.isolation).toBe("container");
    expect(health.limits?.maxOutputBytes).toBe(MiB);
  });

  it("sets the container's own backstop SANDBOX_SLEEP_AFTER past the call's deadline", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const before = Date.now();
    const env = workerEnv({ SANDBOX_SLEEP_AFTER: "90s" });
    const running = exec(
      { sandboxId: id, command: fakeCommand({ hang: true }), timeoutSeconds: 30 },
      { handler, env },
    );
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
    const ns = fakeNamespace();
    const alarm = (await ns.get(ns.idFromName(id)).alarmAt()) ?? 0;
    expect(alarm).toBeGreaterThanOrEqual(before + 30_000 + 90_000);
    expect(alarm).toBeLessThanOrEqual(Date.now() + 30_000 + 90_000);
    await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      handler,
      env,
    });
    expect(JSON.parse((await running).text)).toMatchObject({ outcome: "cancelled" });
    await expectDestroyed(id);
  });

  it("passes cwd and env names on to the container's exec", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: "pwd",
        cwd: "/tmp",
        env: { SECRET_VALUE: "hunter2" },
        timeoutSeconds: 2,
      },
      { handler },
    );
    expect(JSON.parse(answer.text)).toMatchObject({ stdout: "/tmp\n", code: 0 });
    const state = await expectDestroyed(id);
    expect(state.execs[0]).toMatchObject({ cwd: "/tmp", envNames: ["SECRET_VALUE"] });
  });
});

describe("configuration from bindings", () => {
  it("refuses exec with not_configured when BRIDGE_TOKEN is missing", async () => {
    const id = sandboxId();
    const answer = await exec(
      { sandboxId: id, command: "pwd" },
      { env: workerEnv({ BRIDGE_TOKEN: undefined }) },
    );
    expect(answer.status).toBe(503);
    expect(errorBodySchema.parse(JSON.parse(answer.text)).code).toBe("not_configured");
    const touched = await listDurableObjectIds(fakeNamespace());
    expect(touched.map(String)).not.toContain(String(fakeNamespace().idFromName(id)));
  });

  it("runs without a token only when ALLOW_UNAUTHENTICATED is exactly opted into", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const env = workerEnv({ BRIDGE_TOKEN: "", ALLOW_UNAUTHENTICATED: "true" });
    const answer = await exec(
      { sandboxId: id, command: "echo open" },
      { handler, env, headers: { authorization: "" } },
    );
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).stdout).toBe("open\n");
    await expectDestroyed(id);
  });

  it.each([
    ["ALLOW_UNAUTHENTICATED", "yes"],
    ["MAX_OUTPUT_BYTES", "lots"],
    ["MAX_OUTPUT_BYTES", String(64 * MiB)],
    ["MAX_TIMEOUT_SECONDS", "-5"],
    ["HEARTBEAT_INTERVAL_MS", "60000"],
    ["DEFAULT_CWD", "workspace"],
    ["SANDBOX_SLEEP_AFTER", "soon"],
    ["MAX_CONCURRENT_CALLS", "0"],
  ] as const)("answers 503 not_configured naming %s=%s on every route", async (name, value) => {
    const env = workerEnv({ [name]: value });
    for (const answer of [
      await send("/health", { headers: AUTH, env }),
      await exec({ sandboxId: sandboxId(), command: "pwd" }, { env }),
    ]) {
      expect(answer.status).toBe(503);
      const body = errorBodySchema.parse(JSON.parse(answer.text));
      expect(body.code).toBe("not_configured");
      expect(body.error).toContain(name);
      expect(body.error).not.toContain(value);
    }
  });

  it("applies limit overrides, reports them in /health and enforces them", async () => {
    const { handler } = loggingWorker();
    const env = workerEnv({ MAX_TIMEOUT_SECONDS: "10", MAX_REQUEST_BYTES: "2048" });
    const health = JSON.parse((await send("/health", { headers: AUTH, env, handler })).text);
    expect(health.limits).toMatchObject({ maxTimeoutSeconds: 10, maxRequestBytes: 2048 });
    expect(health.admission).toEqual({ maxConcurrent: 32, maxQueued: 32, running: 0, queued: 0 });

    const tooLong = await exec(
      { sandboxId: sandboxId(), command: "pwd", timeoutSeconds: 20 },
      { env, handler },
    );
    expect(tooLong.status).toBe(400);
    expect(JSON.parse(tooLong.text).issues[0].path).toEqual(["timeoutSeconds"]);

    const tooBig = await exec(
      { sandboxId: sandboxId(), command: `echo ${"x".repeat(4096)}` },
      { env, handler },
    );
    expect(tooBig.status).toBe(413);
    expect(JSON.parse(tooBig.text).code).toBe("payload_too_large");
  });

  it("uses DEFAULT_CWD when a request names no cwd", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      { sandboxId: id, command: "pwd" },
      { handler, env: workerEnv({ DEFAULT_CWD: "/srv" }) },
    );
    expect(JSON.parse(answer.text).stdout).toBe("/srv\n");
    await expectDestroyed(id);
  });
});

describe("routes, auth and client mistakes", () => {
  const { handler } = loggingWorker();

  it.each([
    ["no token", {}],
    ["a wrong token", { authorization: "Bearer nope" }],
  ])("answers 401 with %s", async (_, headers) => {
    const answer = await send("/health", { headers, handler });
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.text).code).toBe("unauthorized");
  });

  it("answers 404 for an unknown route and 405 for a wrong method", async () => {
    expect((await send("/nope", { headers: AUTH, handler })).status).toBe(404);
    const wrong = await send("/exec", { headers: AUTH, handler });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST");
  });

  it("answers 400 with the failing path for an invalid request, never starting a sandbox", async () => {
    const id = sandboxId();
    const answer = await exec({ sandboxId: id, command: "" }, { handler });
    expect(answer.status).toBe(400);
    expect(errorBodySchema.parse(JSON.parse(answer.text)).issues?.[0]?.path).toEqual(["command"]);
    const bad = await send("/exec", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: "{not json",
      handler,
    });
    expect(bad.status).toBe(400);
    const touched = await listDurableObjectIds(fakeNamespace());
    expect(touched.map(String)).not.toContain(String(fakeNamespace().idFromName(id)));
  });

  it("serves the OpenAPI document without a token", async () => {
    const answer = await send("/openapi.json", { handler });
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).openapi).toBe("3.1.0");
  });
});

describe("commands through the TaskContainer on a fake container", () => {
  it("caps 100 MiB of output with exact byte totals", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({
          steps: [
            { data: "a", width: 64 * 1024, repeat: 1600 },
            { stream: "stderr", data: "done\n" },
          ],
        }),
      },
      { handler },
    );
    expect(answer.status).toBe(200);
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result).toMatchObject({
      code: 0,
      outcome: "exited",
      stdoutBytes: 100 * MiB,
      stderrBytes: 5,
      stdoutTruncated: true,
      stderrTruncated: false,
      stderr: "done\n",
    });
    expect(result.stdout.length).toBe(MiB);
    const state = await expectDestroyed(id);
    expect(state.bytesSent).toBe(100 * MiB + 5);
  });

  it("reports a non-zero exit as a value (HTTP 200)", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({ steps: [{ stream: "stderr", data: "boom\n" }], exitCode: 3 }),
      },
      { handler },
    );
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text)).toMatchObject({ stderr: "boom\n", code: 3, outcome: "exited" });
    await expectDestroyed(id);
  });

  it("times out a command that hangs past its deadline, stops reading and destroys it", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({ steps: [{ data: "started\n" }], hang: true }),
        timeoutSeconds: 0.3,
      },
      { handler },
    );
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text)).toMatchObject({
      stdout: "started\n",
      code: 124,
      outcome: "timeout",
    });
    await expectDestroyed(id);
  });

  it("keeps endless output capped until the deadline", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({ endless: { data: "y\n", width: 8192 } }),
        timeoutSeconds: 0.5,
        maxOutputBytes: 65_536,
      },
      { handler },
    );
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result).toMatchObject({ code: 124, outcome: "timeout", stdoutTruncated: true });
    expect(result.stdout.length).toBe(65_536);
    expect(result.stdoutBytes).toBeGreaterThan(65_536);
    expect((result.stdoutBytes ?? 0) % 16_384).toBe(0);
    await expectDestroyed(id);
    // The container's side of the output was cancelled (whenever that reached it).
    await expect.poll(async () => (await sandboxState(id)).streamCancelled).toBe(true);
  });

  it("streams slow output as SSE with heartbeats while the command is quiet", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({
          steps: [{ data: "one\n" }, { data: "two\n", delayMs: 400 }],
          exitCode: 0,
        }),
      },
      { handler, stream: true, env: workerEnv({ HEARTBEAT_INTERVAL_MS: "50" }) },
    );
    expect(answer.headers.get("content-type")).toContain("text/event-stream");
    const stream = await events(answer.text);
    expect(stream[0]).toEqual({ type: "start", sandboxId: id, protocol: PROTOCOL_VERSION });
    expect(stream.filter((event) => event.type === "stdout").map((event) => event.data)).toEqual([
      "one\n",
      "two\n",
    ]);
    const heartbeats = stream.filter((event) => event.type === "heartbeat");
    expect(heartbeats.length).toBeGreaterThanOrEqual(2);
    expect(stream.at(-1)).toMatchObject({
      type: "exit",
      result: { stdout: "one\ntwo\n", code: 0 },
    });
    await expectDestroyed(id);
  });
});

describe("platform failures through the TaskContainer on a fake container", () => {
  it("answers 503 capacity_exceeded with Retry-After when no container is free", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      { sandboxId: id, command: fakeCommand({ startError: "capacity" }) },
      { handler },
    );
    expect(answer.status).toBe(503);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("capacity_exceeded");
    expect(body.retryAfterSeconds).toBeGreaterThan(0);
    expect(answer.headers.get("retry-after")).toBe(String(body.retryAfterSeconds));
    await expectDestroyed(id);
  });

  it("answers 502 sandbox_error with a safe message when the platform fails to run it", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      {
        sandboxId: id,
        command: fakeCommand({ startError: "platform" }),
        env: { TOKEN_X: "s3cr3t-value" },
      },
      { handler },
    );
    expect(answer.status).toBe(502);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("sandbox_error");
    expect(answer.text).not.toContain("s3cr3t-value");
    await expectDestroyed(id);
  });

  it.each([
    ["a lost exit code", "event"],
    ["a broken stream", "throw"],
  ] as const)("answers 502 sandbox_error for %s mid-stream (JSON and SSE)", async (_, how) => {
    const { handler } = loggingWorker();
    const command = fakeCommand({ steps: [{ data: "partial\n" }], failMidStream: how });

    const jsonId = sandboxId();
    const json = await exec({ sandboxId: jsonId, command }, { handler });
    expect(json.status).toBe(502);
    expect(JSON.parse(json.text).code).toBe("sandbox_error");
    await expectDestroyed(jsonId);

    const sseId = sandboxId();
    const sse = await events(
      (await exec({ sandboxId: sseId, command }, { handler, stream: true })).text,
    );
    expect(sse.find((event) => event.type === "stdout")).toEqual({
      type: "stdout",
      data: "partial\n",
    });
    expect(sse.at(-1)).toMatchObject({ type: "error", error: { code: "sandbox_error" } });
    await expectDestroyed(sseId);
  });

  it("answers 502 when the output closes and the exit code never comes", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const answer = await exec(
      { sandboxId: id, command: fakeCommand({ closeWithoutExit: true }) },
      { handler },
    );
    expect(answer.status).toBe(502);
    expect(JSON.parse(answer.text).error).toContain("how the command ended is unknown");
    await expectDestroyed(id);
  });
});

describe("destroy and cancel through the TaskContainer on a fake container", () => {
  it("answers before the sandbox is destroyed: the destroy runs in ctx.waitUntil", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const ctx = createExecutionContext();
    const response = await handler.fetch(
      new Request("https://bridge.test/exec", {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify({
          sandboxId: id,
          command: fakeCommand({ steps: [{ data: "fast\n" }], destroyWaits: true }),
        }),
      }),
      workerEnv(),
      ctx,
    );
    expect(await response.json()).toMatchObject({ stdout: "fast\n", code: 0 });
    await expect.poll(async () => (await sandboxState(id)).destroyCalls).toBe(1);
    expect((await sandboxState(id)).destroyed).toBe(false);
    const ns = fakeNamespace();
    await ns.get(ns.idFromName(id)).releaseDestroy();
    await waitOnExecutionContext(ctx);
    await expectDestroyed(id);
  });

  it("keeps the right result when destroy fails, and logs the failure", async () => {
    const id = sandboxId();
    const { handler, entries } = loggingWorker();
    const answer = await exec(
      { sandboxId: id, command: fakeCommand({ steps: [{ data: "ok\n" }], destroyFails: true }) },
      { handler },
    );
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text)).toMatchObject({ stdout: "ok\n", code: 0, outcome: "exited" });
    const state = await sandboxState(id);
    expect(state.destroyCalls).toBe(1);
    expect(state.destroyed).toBe(false);
    expect(entries).toContainEqual(
      expect.objectContaining({ event: "destroy_failed", level: "error", sandboxId: id }),
    );
  });

  it("cancels a running call with POST /cancel and destroys its sandbox", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const env = workerEnv();
    const running = exec({ sandboxId: id, command: fakeCommand({ hang: true }) }, { handler, env });
    await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);

    const conflict = await exec({ sandboxId: id, command: "pwd" }, { handler, env });
    expect(conflict.status).toBe(409);

    const cancel = await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      handler,
      env,
    });
    expect(JSON.parse(cancel.text)).toEqual({ ok: true, sandboxId: id, cancelled: true });
    expect(JSON.parse((await running).text)).toMatchObject({ outcome: "cancelled" });
    await expectDestroyed(id);
  });

  it("destroys the sandbox for POST /cancel of an id this isolate is not running", async () => {
    const id = sandboxId();
    const { handler } = loggingWorker();
    const cancel = await send("/cancel", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
      handler,
    });
    expect(JSON.parse(cancel.text)).toEqual({ ok: true, sandboxId: id, cancelled: false });
    // Its object is used up: a start for it (a call in another isolate) is refused.
    const ns = fakeNamespace();
    const late = await ns
      .get(ns.idFromName(id))
      .start({ network: "none", budgetMs: 1_000, backstopMs: 1_000 })
      .catch((error: unknown) => error);
    expect(String(late)).toContain("never reused");
  });
});
