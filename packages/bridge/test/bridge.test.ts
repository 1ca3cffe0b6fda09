import {
  cancelResponseSchema,
  DISPLAY_MAX_BYTES,
  execResultSchema,
  healthResponseSchema,
  MAX_HEARTBEAT_INTERVAL_MS,
  openApiDocument,
} from "@remote-task/protocol";
import { invalidFixtures, referenceExecRequest } from "@remote-task/protocol/fixtures";
import { afterEach, describe, expect, it } from "vitest";
import {
  BackendError,
  CANCELLED_EXIT_CODE,
  createBridge,
  DEFAULT_LIMITS,
  defaultAdmission,
  type ExecLogEntry,
  MIN_OUTPUT_CAP_BYTES,
} from "../src/index.js";
import { createFakeBackend } from "../src/testing/index.js";
import {
  events,
  eventually,
  expectError,
  freshId,
  memoryLogger,
  request,
  setupBridge,
  shutdownBridges,
  TOKEN,
  trackBridge,
} from "./helpers.js";

afterEach(shutdownBridges);

describe("routes and auth", () => {
  it("answers /health with protocol, backend, isolation, limits and version", async () => {
    const { bridge } = setupBridge({ version: "9.9.9" }, { name: "fake", isolation: "none" });
    const response = await bridge(request("/health"));
    expect(response.status).toBe(200);
    const body = healthResponseSchema.parse(await response.json());
    expect(body).toEqual({
      ok: true,
      protocol: 3,
      backend: "fake",
      isolation: "none",
      limits: DEFAULT_LIMITS,
      // The settings and the load; the byte bound of the queue is not reported.
      admission: {
        maxConcurrent: defaultAdmission().maxConcurrent,
        maxQueued: defaultAdmission().maxQueued,
        running: 0,
        queued: 0,
      },
      version: "9.9.9",
      instance: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
  });

  it("adds what the backend reports to /health, the bridge's own fields first", async () => {
    const fake = createFakeBackend();
    const warmPool = { target: 8, ready: 5, starting: 3 };
    const backend = Object.assign(Object.create(fake), {
      health: async () => ({ warmPool, ok: false, backend: "other" }),
    });
    const bridge = createBridge({ backend, token: TOKEN });
    trackBridge(bridge);
    const body = healthResponseSchema.parse(await (await bridge(request("/health"))).json());
    expect(body).toMatchObject({ ok: true, backend: "fake", warmPool });
  });

  it("answers /health without the backend's fields when its health() fails, and logs it", async () => {
    const backend = Object.assign(Object.create(createFakeBackend()), {
      health: async () => {
        throw new Error("pool unreachable");
      },
    });
    const logger = memoryLogger();
    const bridge = createBridge({ backend, token: TOKEN, logger });
    trackBridge(bridge);
    const response = await bridge(request("/health"));
    expect(response.status).toBe(200);
    const body = healthResponseSchema.parse(await response.json());
    expect(body.warmPool).toBeUndefined();
    expect(body).toMatchObject({ ok: true, backend: "fake" });
    expect(logger.entries).toContainEqual(
      expect.objectContaining({
        event: "internal_error",
        detail: expect.stringContaining("pool unreachable"),
      }),
    );
  });

  it("serves the protocol OpenAPI document without auth", async () => {
    const { bridge } = setupBridge();
    const response = await bridge(request("/openapi.json", { token: null }));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(openApiDocument());
  });

  it("answers 404 not_found for unknown routes and 405 with Allow for wrong methods", async () => {
    const { bridge } = setupBridge();
    await expectError(await bridge(request("/nope")), "not_found");
    await expectError(await bridge(request("/exec/", { body: {} })), "not_found");
    const wrong = await bridge(request("/exec"));
    await expectError(wrong, "method_not_allowed");
    expect(wrong.headers.get("allow")).toBe("POST");
    await expectError(await bridge(request("/health", { method: "DELETE" })), "method_not_allowed");
    await expectError(
      await bridge(request("/cancel", { method: "PUT", body: {} })),
      "method_not_allowed",
    );
  });

  it("refuses a missing, malformed or wrong token with 401 on every protected route", async () => {
    const { bridge, backend } = setupBridge();
    for (const token of [null, "", "wrong", `${TOKEN}x`, TOKEN.slice(0, -1)]) {
      const response = await bridge(request("/exec", { body: referenceExecRequest, token }));
      await expectError(response, "unauthorized");
      expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/);
    }
    await expectError(await bridge(request("/health", { token: "nope" })), "unauthorized");
    await expectError(
      await bridge(request("/cancel", { body: { sandboxId: "a" }, token: "nope" })),
      "unauthorized",
    );
    await expectError(
      await bridge(
        request("/health", { token: null, headers: { authorization: `Basic ${TOKEN}` } }),
      ),
      "unauthorized",
    );
    expect(backend.starts).toHaveLength(0);
    const ok = await bridge(
      request("/health", { token: null, headers: { authorization: `bearer ${TOKEN}` } }),
    );
    expect(ok.status).toBe(200);
  });

  it("without a token refuses every route but /openapi.json with not_configured naming BRIDGE_TOKEN", async () => {
    const backend = createFakeBackend();
    const bridge = createBridge({ backend, logger: memoryLogger() });
    trackBridge(bridge);
    const exec = await expectError(
      await bridge(request("/exec", { body: referenceExecRequest, token: null })),
      "not_configured",
    );
    expect(exec.error).toContain("BRIDGE_TOKEN");
    await expectError(await bridge(request("/health", { token: null })), "not_configured");
    await expectError(
      await bridge(request("/cancel", { body: { sandboxId: "a" }, token: null })),
      "not_configured",
    );
    expect((await bridge(request("/openapi.json", { token: null }))).status).toBe(200);
    expect(backend.starts).toHaveLength(0);
  });

  it("runs without a token only when allowUnauthenticated is set", async () => {
    const backend = createFakeBackend();
    const bridge = createBridge({ backend, allowUnauthenticated: true, logger: memoryLogger() });
    trackBridge(bridge);
    const response = await bridge(request("/exec", { body: referenceExecRequest, token: null }));
    expect(await response.json()).toMatchObject({ stdout: "/workspace\n", code: 0 });
  });

  it("rejects a heartbeat interval above the protocol maximum", () => {
    expect(() =>
      createBridge({
        backend: createFakeBackend(),
        token: TOKEN,
        heartbeatIntervalMs: MAX_HEARTBEAT_INTERVAL_MS + 1,
      }),
    ).toThrow(TypeError);
    expect(() =>
      createBridge({ backend: createFakeBackend(), token: TOKEN, limits: { maxOutputBytes: 0 } }),
    ).toThrow(/maxOutputBytes/);
  });

  it("answers 500 internal (and logs it) only when the bridge itself fails", async () => {
    const backend = createFakeBackend();
    const broken = Object.create(backend, {
      isolation: {
        get() {
          throw new Error("isolation probe crashed");
        },
      },
    });
    const logger = memoryLogger();
    const bridge = createBridge({ backend: broken, token: TOKEN, logger });
    trackBridge(bridge);
    await expectError(await bridge(request("/health")), "internal");
    expect(logger.entries).toContainEqual(
      expect.objectContaining({
        event: "internal_error",
        detail: expect.stringContaining("crashed"),
      }),
    );
  });
});

describe("request validation", () => {
  it("answers 400 with issues for every invalid exec fixture of the protocol", async () => {
    const { bridge, backend } = setupBridge();
    for (const fixture of invalidFixtures.filter((f) => f.schema === "ExecRequest")) {
      const body = await expectError(
        await bridge(request("/exec", { body: fixture.value })),
        "invalid_request",
      );
      expect(
        body.issues?.map((i) => i.path),
        fixture.name,
      ).toContainEqual(fixture.failingPath);
    }
    expect(backend.starts).toHaveLength(0);
  });

  it("answers 400 for malformed JSON, invalid UTF-8, non-object bodies and wrong content types", async () => {
    const { bridge } = setupBridge();
    const cases: Array<Parameters<typeof request>[1]> = [
      { raw: "{not json", method: "POST", headers: { "content-type": "application/json" } },
      { raw: new Uint8Array([0x7b, 0xff, 0x7d]), method: "POST" },
      { raw: "[1,2]", method: "POST" },
      { raw: "null", method: "POST" },
      { raw: "", method: "POST" },
      { body: referenceExecRequest, headers: { "content-type": "multipart/form-data" } },
      { body: referenceExecRequest, headers: { "content-type": "application/octet-stream" } },
      {
        body: referenceExecRequest,
        headers: { "content-type": "application/x-www-form-urlencoded" },
      },
    ];
    for (const init of cases) {
      const body = await expectError(await bridge(request("/exec", init)), "invalid_request");
      expect(body.issues?.length).toBeGreaterThan(0);
    }
    await expectError(
      await bridge(request("/cancel", { body: { sandboxId: "not_an_id" } })),
      "invalid_request",
    );
    for (const type of ["application/json; charset=utf-8", "text/plain;charset=UTF-8"]) {
      const typed = await bridge(
        request("/exec", {
          body: { ...referenceExecRequest, sandboxId: freshId() },
          headers: { "content-type": type },
        }),
      );
      expect(typed.status, type).toBe(200);
    }
    // What `fetch` sends for a string body without a content type.
    const plain = await bridge(
      new Request("http://bridge.test/exec", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ ...referenceExecRequest, sandboxId: freshId() }),
      }),
    );
    expect(plain.status).toBe(200);
  });

  it("refuses a body that breaks off mid-upload as a bad request, without an error log line", async () => {
    const { bridge, backend, logger } = setupBridge();
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"sandboxId":'));
        controller.error(new Error("aborted"));
      },
    });
    const answer = await expectError(
      await bridge(request("/exec", { raw: body, method: "POST" })),
      "invalid_request",
    );
    expect(answer.issues).toEqual([
      { path: [], message: "the request body broke off before its end" },
    ]);
    expect(logger.entries).toEqual([]);
    expect(backend.starts).toEqual([]);
  });

  it("says what is wrong in its error text too, for readers of `error` alone (the reference tool)", async () => {
    const { exec } = setupBridge({ limits: { maxTimeoutSeconds: 5 } });
    expect((await expectError(await exec({ command: "" }), "invalid_request")).error).toBe(
      "Exec request is invalid: command must not be empty.",
    );
    const over = await expectError(
      await exec({ command: "true", timeoutSeconds: 6 }),
      "invalid_request",
    );
    expect(over.error).toBe(
      "Exec request exceeds the bridge limits: timeoutSeconds must be at most 5.",
    );
  });

  it("enforces the command, env, timeout limits with the failing path", async () => {
    const limits = {
      maxCommandBytes: 10,
      maxEnvEntries: 2,
      maxEnvEntryBytes: 8,
      maxTimeoutSeconds: 5,
    };
    const { exec, backend } = setupBridge({ limits });
    const paths = async (body: Record<string, unknown>) =>
      (await expectError(await exec(body), "invalid_request")).issues?.map((i) => i.path);
    expect(await paths({ command: "echo 12345678" })).toEqual([["command"]]);
    expect(await paths({ command: "é".repeat(6) })).toEqual([["command"]]);
    expect(await paths({ command: "true", timeoutSeconds: 6 })).toEqual([["timeoutSeconds"]]);
    expect(await paths({ command: "true", env: { A: "1", B: "2", C: "3" } })).toEqual([["env"]]);
    expect(await paths({ command: "true", env: { LONG: "12345" } })).toEqual([["env", "LONG"]]);
    // Without timeoutSeconds the default (120 s) is held to the limit.
    expect((await exec({ command: "true" })).status).toBe(200);
    expect(backend.starts.at(-1)?.timeoutMs).toBe(5_000);
    expect(
      (await exec({ command: "true", timeoutSeconds: 5, env: { A: "1", B: "2" } })).status,
    ).toBe(200);
  });

  it("answers 413 for a body over maxRequestBytes, whether or not Content-Length says so", async () => {
    const { bridge, backend } = setupBridge({ limits: { maxRequestBytes: 1_000 } });
    const big = { ...referenceExecRequest, command: `echo ${"x".repeat(2_000)}` };
    await expectError(await bridge(request("/exec", { body: big })), "payload_too_large");
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled++;
        controller.enqueue(new Uint8Array(400).fill(0x20));
      },
    });
    await expectError(
      await bridge(request("/exec", { raw: endless, method: "POST" })),
      "payload_too_large",
    );
    expect(pulled).toBeLessThan(10);
    const lying = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(JSON.stringify(big)));
        controller.close();
      },
    });
    const req = request("/exec", {
      raw: lying,
      method: "POST",
      headers: { "content-length": "10" },
    });
    await expectError(await bridge(req), "payload_too_large");
    expect(backend.starts).toHaveLength(0);
  });

  it("never echoes env values in errors", async () => {
    const { exec } = setupBridge({ limits: { maxEnvEntryBytes: 20 } });
    const secret = "s3cr3t-value-that-is-long";
    const response = await exec({ command: "true", env: { KEY: secret, "BAD-NAME": secret } });
    const text = await response.text();
    expect(response.status).toBe(400);
    expect(text).not.toContain(secret);
  });
});

describe("exec: results, caps and timeouts", () => {
  it("runs the exact reference exchange and returns the reference shape plus extensions", async () => {
    const { bridge } = setupBridge();
    const response = await bridge(request("/exec", { body: referenceExecRequest }));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    const result = execResultSchema.parse(await response.json());
    expect(result).toMatchObject({ stdout: "/workspace\n", stderr: "", code: 0 });
    expect(result).toMatchObject({ outcome: "exited", stdoutBytes: 11, stdoutTruncated: false });
  });

  it("passes cwd, env and the deadline to the backend and destroys the sandbox", async () => {
    const { exec, backend } = setupBridge({ defaultCwd: "/srv" });
    await exec({ command: "true", env: { A: "b" }, timeoutSeconds: 7 });
    await exec({ command: "true", cwd: "/workspace/x" });
    expect(backend.starts[0]).toMatchObject({ cwd: "/srv", env: { A: "b" }, timeoutMs: 7_000 });
    expect(backend.starts[1]).toMatchObject({ cwd: "/workspace/x", env: {}, timeoutMs: 120_000 });
    expect(backend.destroys).toEqual(backend.starts.map((s) => s.sandboxId));
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("keeps the tail of each stream within the cap, exact totals, and UTF-8 cut cleanly", async () => {
    const cap = MIN_OUTPUT_CAP_BYTES;
    const { exec } = setupBridge(
      { limits: { maxOutputBytes: cap } },
      {
        script: () => ({
          chunks: [{ data: "start" }, { stream: "stderr", data: "e" }],
          repeat: { chunk: { data: new TextEncoder().encode("ab€\n") }, times: 50_000 },
        }),
      },
    );
    const result = execResultSchema.parse(await (await exec({ command: "x" })).json());
    const total = 5 + 50_000 * 6;
    expect(result).toMatchObject({ stdoutBytes: total, stdoutTruncated: true, stderr: "e" });
    const retained = new TextEncoder().encode(result.stdout).byteLength;
    expect(retained).toBeLessThanOrEqual(cap);
    expect(retained).toBeGreaterThan(cap - 4);
    expect(result.stdout.endsWith("ab€\n")).toBe(true);
    expect(result.stdout).not.toContain("\uFFFD");
  });

  it("lets a request lower the cap, never below the display window, never above the limit", async () => {
    const { exec } = setupBridge(
      { limits: { maxOutputBytes: 200_000 } },
      { script: () => ({ repeat: { chunk: { data: "x".repeat(1_000) }, times: 500 } }) },
    );
    const size = async (maxOutputBytes?: number) => {
      const body =
        maxOutputBytes === undefined ? { command: "x" } : { command: "x", maxOutputBytes };
      const result = execResultSchema.parse(await (await exec(body)).json());
      expect(result.stdoutBytes).toBe(500_000);
      return result.stdout.length;
    };
    expect(await size()).toBe(200_000);
    expect(await size(100_000)).toBe(100_000);
    expect(await size(10)).toBe(DISPLAY_MAX_BYTES + 4);
    expect(await size(10_000_000)).toBe(200_000);
  });

  it("times out a hanging command: 124, outcome timeout, output so far, sandbox destroyed", async () => {
    const { exec, backend, logger } = setupBridge(
      {},
      { script: () => ({ chunks: [{ data: "partial\n" }], hang: true }) },
    );
    const result = execResultSchema.parse(
      await (await exec({ command: "x", timeoutSeconds: 0.2 })).json(),
    );
    expect(result).toMatchObject({ code: 124, outcome: "timeout", stdout: "partial\n" });
    expect(backend.starts[0]?.signal.aborted).toBe(true);
    expect(backend.liveSandboxes()).toBe(0);
    expect(logger.entries[0]).toMatchObject({
      event: "exec",
      outcome: "timeout",
      endedBy: "timeout",
    });
  });

  it("logs whether the sandbox came from a warm pool, when the backend says", async () => {
    const fake = createFakeBackend();
    const backend = Object.assign(Object.create(fake), {
      start: async (spec: Parameters<typeof fake.start>[0]) => ({
        ...(await fake.start(spec)),
        warm: spec.command === "echo warm",
      }),
    });
    const logger = memoryLogger();
    const bridge = createBridge({ backend, token: TOKEN, logger });
    trackBridge(bridge);
    for (const command of ["echo warm", "echo cold"]) {
      await bridge(request("/exec", { body: { sandboxId: freshId(), command } }));
    }
    const plain = setupBridge();
    await plain.exec({ command: "echo unknown" });
    expect(logger.entries.map((entry) => (entry as ExecLogEntry).warm)).toEqual([true, false]);
    expect(plain.logger.entries[0]).not.toHaveProperty("warm");
  });

  it("times out while the sandbox is still starting and destroys it once started", async () => {
    const { exec, backend } = setupBridge({}, { startLatencyMs: 400 });
    const result = execResultSchema.parse(
      await (await exec({ command: "echo hi", timeoutSeconds: 0.1 })).json(),
    );
    expect(result).toMatchObject({ code: 124, outcome: "timeout", stdout: "" });
    expect(backend.liveSandboxes()).toBe(0);
    expect(backend.destroys).toHaveLength(1);
  });

  it("does not wait for a backend that ignores the abort signal", async () => {
    const { exec, backend } = setupBridge(
      {},
      { script: () => ({ hang: true, ignoreAbort: true }) },
    );
    const result = execResultSchema.parse(
      await (await exec({ command: "x", timeoutSeconds: 0.2 })).json(),
    );
    expect(result.outcome).toBe("timeout");
    expect(backend.liveSandboxes()).toBe(0);
  });
});

describe("exec: backend failures and sandbox ids", () => {
  it("maps BackendError codes: invalid_request with path, capacity 503 with Retry-After, sandbox_error 502", async () => {
    const errors: Record<string, unknown> = {
      cwd: new BackendError("invalid_request", "cwd is not allowed here", { path: ["cwd"] }),
      full: new BackendError("capacity_exceeded", "No sandbox capacity", { retryAfterSeconds: 7 }),
      fullDefault: new BackendError("capacity_exceeded", "No sandbox capacity"),
      broke: new BackendError("sandbox_error", "Container crashed"),
    };
    const { exec, backend } = setupBridge(
      {},
      { script: (spec) => ({ startError: errors[spec.command] }) },
    );
    const cwd = await expectError(await exec({ command: "cwd" }), "invalid_request");
    expect(cwd.issues).toEqual([{ path: ["cwd"], message: "cwd is not allowed here" }]);
    const full = await exec({ command: "full" });
    expect(full.headers.get("retry-after")).toBe("7");
    expect((await expectError(full, "capacity_exceeded")).retryAfterSeconds).toBe(7);
    const fullDefault = await exec({ command: "fullDefault" });
    expect(Number(fullDefault.headers.get("retry-after"))).toBeGreaterThan(0);
    await expectError(fullDefault, "capacity_exceeded");
    expect((await expectError(await exec({ command: "broke" }), "sandbox_error")).error).toBe(
      "Container crashed",
    );
    expect(backend.destroys).toHaveLength(4);
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("turns any other backend failure into a generic 502 and logs the detail without secrets", async () => {
    const secret = "hunter2-env-value";
    const { exec, backend, logger } = setupBridge(
      {},
      {
        script: (spec) =>
          spec.command === "start"
            ? { startError: new Error(`boom ${spec.env.SECRET} ${TOKEN}`) }
            : spec.command === "exit"
              ? { chunks: [{ data: "x" }], exitError: new TypeError(`lost ${spec.env.SECRET}`) }
              : { chunks: [{ data: "x" }], outputError: "string thrown" },
      },
    );
    for (const command of ["start", "exit", "output"]) {
      const response = await exec({ command, env: { SECRET: secret } });
      const text = await response.clone().text();
      expect(text).not.toContain(secret);
      expect(text).not.toContain("boom");
      await expectError(response, "sandbox_error");
    }
    expect(backend.liveSandboxes()).toBe(0);
    const entries = logger.entries as ExecLogEntry[];
    expect(entries.map((e) => e.errorCode)).toEqual([
      "sandbox_error",
      "sandbox_error",
      "sandbox_error",
    ]);
    expect(entries[0]?.detail).toContain("boom");
    expect(entries[1]?.detail).toContain("TypeError: lost");
    const logged = JSON.stringify(logger.entries);
    expect(logged).not.toContain(secret);
    expect(logged).not.toContain(TOKEN);
  });

  it("fails promptly when the backend reports failure while the output is still open", async () => {
    const fake = createFakeBackend();
    const backend = {
      ...fake,
      name: fake.name,
      isolation: fake.isolation,
      async start(spec: Parameters<typeof fake.start>[0]) {
        await fake.start({ ...spec, command: "sleep 30" });
        async function* never() {
          yield { stream: "stdout" as const, data: "x" };
          await new Promise(() => {});
        }
        return { output: never(), exit: Promise.reject(new Error("container died")) };
      },
    };
    const bridge = createBridge({ backend, token: TOKEN, logger: memoryLogger() });
    trackBridge(bridge);
    const response = await bridge(
      request("/exec", { body: { sandboxId: freshId(), command: "x" } }),
    );
    await expectError(response, "sandbox_error");
    expect(fake.liveSandboxes()).toBe(0);
  });

  it("refuses a concurrent call for a running id with 409 and accepts it after the first ended", async () => {
    const { bridge, exec, backend } = setupBridge();
    const sandboxId = freshId();
    const first = exec({ sandboxId, command: "sleep 0.3; echo first" });
    await eventually(() => backend.starts.length === 1, "first start");
    await expectError(await exec({ sandboxId, command: "echo second" }), "conflict");
    expect(await (await first).json()).toMatchObject({ stdout: "first\n" });
    expect(await (await exec({ sandboxId, command: "echo third" })).json()).toMatchObject({
      stdout: "third\n",
    });
    expect(backend.starts).toHaveLength(2);
    expect(bridge.activeCalls).toBe(0);
  });

  it("takes an upper-case sandbox id as the reference does, lower-cased, for /exec and /cancel alike", async () => {
    const { bridge, exec, backend } = setupBridge();
    const pending = exec({ sandboxId: "MyTask-A1", command: "sleep 30" }, { stream: true });
    await eventually(() => backend.starts.length === 1, "start");
    expect(backend.starts[0]?.sandboxId).toBe("mytask-a1");
    const stream = events(await pending);
    expect(await stream.next()).toMatchObject({ type: "start", sandboxId: "mytask-a1" });
    // The same id in another case names the same call.
    await expectError(await exec({ sandboxId: "mytask-a1", command: "x" }), "conflict");
    const cancel = await bridge(request("/cancel", { body: { sandboxId: "MYTASK-A1" } }));
    expect(await cancel.json()).toEqual({ ok: true, sandboxId: "mytask-a1", cancelled: true });
    expect(await stream.next()).toMatchObject({ type: "exit", result: { outcome: "cancelled" } });
    expect(backend.destroys).toEqual(["mytask-a1"]);
    // Only ASCII letters are lowered: anything else outside the id pattern is still refused.
    for (const sandboxId of ["\u212Aelvin", "Ärger", "My_Task", "-Lead"]) {
      const refused = await expectError(await exec({ sandboxId, command: "x" }), "invalid_request");
      expect(refused.issues?.[0]?.path).toEqual(["sandboxId"]);
    }
    expect(backend.starts).toHaveLength(1);
  });

  it("logs one line per call with id, duration, outcome and bytes, never env values or the token", async () => {
    const { exec, logger } = setupBridge();
    const sandboxId = freshId();
    await exec({ sandboxId, command: "echo hello; exit 2", env: { SECRET: "top-secret-value" } });
    expect(logger.entries).toHaveLength(1);
    expect(logger.entries[0]).toMatchObject({
      event: "exec",
      level: "info",
      sandboxId,
      outcome: "exited",
      code: 2,
      stdoutBytes: 6,
      stderrBytes: 0,
      streamed: false,
    });
    expect((logger.entries[0] as ExecLogEntry).durationMs).toBeGreaterThanOrEqual(0);
    expect(JSON.stringify(logger.entries)).not.toMatch(/top-secret-value|test-token/);
  });

  it("logs how long the sandbox took to start, once its command ran", async () => {
    const { exec, logger } = setupBridge({}, { startLatencyMs: 150 });
    await exec({ command: "echo hi" });
    const [entry] = logger.entries as ExecLogEntry[];
    expect(entry?.startMs).toBeGreaterThanOrEqual(140);
    expect(entry?.startMs).toBeLessThanOrEqual(entry?.durationMs ?? 0);
    const failing = setupBridge({}, { script: () => ({ startError: new Error("no sandbox") }) });
    await failing.exec({ command: "x" });
    expect(failing.logger.entries[0]).not.toHaveProperty("startMs");
  });

  it("keeps working when the logger throws", async () => {
    const backend = createFakeBackend();
    const bridge = createBridge({
      backend,
      token: TOKEN,
      logger: () => {
        throw new Error("log sink down");
      },
    });
    trackBridge(bridge);
    const response = await bridge(request("/exec", { body: referenceExecRequest }));
    expect(response.status).toBe(200);
    expect(backend.liveSandboxes()).toBe(0);
  });
});

describe("cancel, disconnect, shutdown and waitUntil", () => {
  it("cancels a JSON call: the caller gets outcome cancelled, cancel is idempotent", async () => {
    const { bridge, exec, backend } = setupBridge();
    const sandboxId = freshId();
    const pending = exec({ sandboxId, command: "echo a; sleep 30" });
    await eventually(() => backend.starts.length === 1, "start");
    const cancel = await bridge(request("/cancel", { body: { sandboxId } }));
    expect(cancelResponseSchema.parse(await cancel.json())).toEqual({
      ok: true,
      sandboxId,
      cancelled: true,
    });
    expect(backend.liveSandboxes()).toBe(0);
    const result = execResultSchema.parse(await (await pending).json());
    expect(result).toMatchObject({ outcome: "cancelled", code: CANCELLED_EXIT_CODE });
    const again = await bridge(request("/cancel", { body: { sandboxId } }));
    expect(await again.json()).toEqual({ ok: true, sandboxId, cancelled: false });
    const unknown = freshId();
    expect(
      await (await bridge(request("/cancel", { body: { sandboxId: unknown } }))).json(),
    ).toEqual({ ok: true, sandboxId: unknown, cancelled: false });
    expect(backend.destroys).toContain(unknown);
  });

  it("destroys the sandbox when a streaming client cancels the stream mid-output", async () => {
    const { exec, backend, logger } = setupBridge(
      {},
      { script: () => ({ chunks: [{ data: "tick\n" }], hang: true }) },
    );
    const stream = events(await exec({ command: "x" }, { stream: true }));
    expect((await stream.next())?.type).toBe("start");
    expect(await stream.next()).toEqual({ type: "stdout", data: "tick\n" });
    await stream.cancel();
    await eventually(() => backend.liveSandboxes() === 0, "destroy after stream cancel");
    expect(backend.starts[0]?.signal.aborted).toBe(true);
    await eventually(() => logger.entries.length === 1, "log line");
    expect(logger.entries[0]).toMatchObject({ outcome: "cancelled", endedBy: "disconnect" });
  });

  it("destroys the sandbox when the request signal aborts", async () => {
    const { exec, backend } = setupBridge({}, { script: () => ({ hang: true }) });
    const controller = new AbortController();
    const pending = exec({ command: "x" }, { signal: controller.signal });
    await eventually(() => backend.starts.length === 1, "start");
    controller.abort();
    await pending;
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("sends an error event when the backend fails mid-stream", async () => {
    const { exec, backend } = setupBridge(
      {},
      { script: () => ({ chunks: [{ data: "a" }], exitError: new Error("died") }) },
    );
    const all = await events(await exec({ command: "x" }, { stream: true })).all();
    expect(all.map((e) => e.type)).toEqual(["start", "stdout", "error"]);
    expect(all[2]).toMatchObject({ type: "error", error: { code: "sandbox_error" } });
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("answers a streamed request that fails to start with an HTTP error, not a stream", async () => {
    const { exec } = setupBridge(
      {},
      {
        script: () => ({
          startError: new BackendError("capacity_exceeded", "full", { retryAfterSeconds: 2 }),
        }),
      },
    );
    const response = await exec({ command: "x" }, { stream: true });
    expect(response.headers.get("retry-after")).toBe("2");
    await expectError(response, "capacity_exceeded");
  });

  it("shutdown cancels every call in flight, destroys its sandbox, and refuses new calls", async () => {
    const { bridge, exec, backend } = setupBridge(
      {},
      { script: () => ({ hang: true }), destroyLatencyMs: 50 },
    );
    const json = exec({ command: "x" });
    const stream = exec({ command: "y" }, { stream: true });
    await eventually(() => backend.starts.length === 2, "starts");
    await bridge.shutdown();
    expect(backend.liveSandboxes()).toBe(0);
    expect(bridge.activeCalls).toBe(0);
    expect(await (await json).json()).toMatchObject({ outcome: "cancelled" });
    const streamed = await events(await stream).all();
    expect(streamed.at(-1)).toMatchObject({ type: "exit", result: { outcome: "cancelled" } });
    await expectError(await exec({ command: "z" }), "capacity_exceeded");
  });

  it("with waitUntil answers before the sandbox is destroyed and hands the cleanup over", async () => {
    const handed: Promise<unknown>[] = [];
    const { exec, backend } = setupBridge(
      { waitUntil: (p) => handed.push(p) },
      { destroyLatencyMs: 300 },
    );
    const response = await exec({ command: "echo hi" });
    expect(response.status).toBe(200);
    expect(backend.liveSandboxes()).toBe(1);
    expect(handed).toHaveLength(1);
    await handed[0];
    expect(backend.liveSandboxes()).toBe(0);
  });

  it("accepts waitUntil per request through the handler context", async () => {
    const handed: Promise<unknown>[] = [];
    const { bridge, backend } = setupBridge({}, { destroyLatencyMs: 100 });
    const response = await bridge.fetch(
      request("/exec", { body: { sandboxId: freshId(), command: "true" } }),
      { waitUntil: (p) => handed.push(p) },
    );
    expect(response.status).toBe(200);
    expect(handed).toHaveLength(1);
    await Promise.all(handed);
    expect(backend.liveSandboxes()).toBe(0);
  });
});
