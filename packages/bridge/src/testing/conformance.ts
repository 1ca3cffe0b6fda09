import {
  type ExecResult,
  errorBodySchema,
  execResultSchema,
  type StreamEvent,
  TIMEOUT_EXIT_CODE,
} from "@remote-task/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { ExecSpec, SandboxBackend } from "../backend.js";
import { type BridgeHandler, createBridge } from "../bridge.js";
import { CANCELLED_EXIT_CODE } from "../call.js";
import { silentLogger } from "../logger.js";
import { readStreamEvents } from "./stream-events.js";

/** The checks of the suite, by name. */
export type ConformanceCheck =
  | "exit-code"
  | "streams"
  | "cwd"
  | "missing-cwd"
  | "bash"
  | "output-cap"
  | "stream-cap"
  | "timeout"
  | "cancel"
  | "conflict"
  | "stream-disconnect"
  | "request-abort"
  | "heartbeat"
  | "stdin";

export interface ConformanceOptions {
  /**
   * Checks this backend cannot take part in, with the reason; they are registered as skipped with
   * the reason in their title, never dropped silently.
   */
  skip?: Partial<Record<ConformanceCheck, string>> | undefined;
  /** Live sandboxes according to the backend, checked to be 0 after every test when given. */
  liveSandboxes?: ((backend: SandboxBackend) => number | Promise<number>) | undefined;
  /** Output size of the large-output test in bytes (default 3 000 000). */
  largeOutputBytes?: number | undefined;
  /** Extra time allowed for sandbox startup per call, for slow backends (default 10 000 ms). */
  startupAllowanceMs?: number | undefined;
}

/** Records the starts and destroys of any backend so destroy-on-every-path can be checked. */
function recording(inner: SandboxBackend) {
  const started: string[] = [];
  const destroyed: string[] = [];
  const backend: SandboxBackend = {
    get name() {
      return inner.name;
    },
    get isolation() {
      return inner.isolation;
    },
    get networkModes() {
      return inner.networkModes;
    },
    start(spec: ExecSpec) {
      started.push(spec.sandboxId);
      return inner.start(spec);
    },
    async destroy(id: string) {
      await inner.destroy(id);
      destroyed.push(id);
    },
  };
  return { backend, started, destroyed };
}

const TOKEN = "conformance-token";
let counter = 0;
const freshId = () =>
  `conformance-${Date.now().toString(36)}-${(counter++).toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

function post(path: string, body: unknown, init: { stream?: boolean; signal?: AbortSignal } = {}) {
  return new Request(`http://bridge.test${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${TOKEN}`,
      "content-type": "application/json",
      ...(init.stream ? { accept: "text/event-stream" } : {}),
    },
    body: JSON.stringify(body),
    ...(init.signal ? { signal: init.signal } : {}),
  });
}

async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Starts a streamed `sleep 30` for a fresh id and reads its `start` event. */
async function startSleeping(bridge: BridgeHandler) {
  const sandboxId = freshId();
  const response = await bridge(
    post("/exec", { sandboxId, command: "sleep 30" }, { stream: true }),
  );
  const events = readStreamEvents(response);
  expect((await events.next())?.type).toBe("start");
  return { sandboxId, events };
}

/**
 * Registers vitest tests that drive `makeBackend()` through `createBridge` and check the
 * behaviour every backend owes the bridge. Commands use a small vocabulary that a real shell and
 * `createFakeBackend()` both understand: `echo WORDS`, `echo WORDS >&2`, `exit N`, `sleep N`,
 * `yes | head -c N`, `pwd`, `cat` (copies stdin), joined by `; `. No `node:` import, so it also
 * runs inside workerd.
 */
export function backendConformanceSuite(
  name: string,
  makeBackend: () => SandboxBackend | Promise<SandboxBackend>,
  options: ConformanceOptions = {},
): void {
  const startup = options.startupAllowanceMs ?? 10_000;
  const largeBytes = options.largeOutputBytes ?? 3_000_000;

  const check = (key: ConformanceCheck, title: string, body: () => Promise<void>) => {
    const reason = options.skip?.[key];
    if (reason === undefined) it(title, body);
    else it.skip(`${title} (skipped for this backend: ${reason})`, body);
  };

  describe(`SandboxBackend conformance: ${name}`, () => {
    let cleanup: Array<() => Promise<void>> = [];

    async function setup(limits: { maxOutputBytes?: number } = {}, heartbeatIntervalMs?: number) {
      const inner = await makeBackend();
      const rec = recording(inner);
      const bridge: BridgeHandler = createBridge({
        backend: rec.backend,
        token: TOKEN,
        logger: silentLogger,
        limits,
        heartbeatIntervalMs,
      });
      cleanup.push(async () => {
        await bridge.shutdown();
        if (options.liveSandboxes !== undefined) {
          expect(await options.liveSandboxes(inner)).toBe(0);
        }
      });
      const exec = async (body: Record<string, unknown>): Promise<ExecResult> => {
        const response = await bridge(post("/exec", { sandboxId: freshId(), ...body }));
        const json: unknown = await response.json();
        expect(response.status, JSON.stringify(json)).toBe(200);
        return execResultSchema.parse(json);
      };
      return { bridge, rec, exec, inner };
    }

    afterEach(async () => {
      const steps = cleanup;
      cleanup = [];
      for (const step of steps) await step();
    });

    const suite: Suite = { check, setup, startup, largeBytes };
    commandChecks(suite);
    lifecycleChecks(suite);
  });
}

/** What one backend's checks share: how a check is registered, a bridge over the backend. */
interface Suite {
  check: (key: ConformanceCheck, title: string, body: () => Promise<void>) => void;
  setup: (
    limits?: { maxOutputBytes?: number },
    heartbeatIntervalMs?: number,
  ) => Promise<{
    bridge: BridgeHandler;
    rec: ReturnType<typeof recording>;
    exec: (body: Record<string, unknown>) => Promise<ExecResult>;
    inner: SandboxBackend;
  }>;
  startup: number;
  largeBytes: number;
}

/** What a command sees and what its answer reports: exit codes, output, cwd, shell, caps. */
function commandChecks(suite: Suite): void {
  const { check, setup, startup, largeBytes } = suite;
  check("exit-code", "reports exit code 0 and stdout", async () => {
    const { exec, rec } = await setup();
    const result = await exec({ command: "echo hello" });
    expect(result).toMatchObject({ stdout: "hello\n", stderr: "", code: 0, outcome: "exited" });
    expect(result.stdoutBytes).toBe(6);
    expect(rec.destroyed).toEqual(rec.started);
  });

  check(
    "streams",
    "keeps stdout and stderr apart and reports a non-zero exit as a value",
    async () => {
      const { exec, rec } = await setup();
      const result = await exec({ command: "echo out; echo err >&2; exit 3" });
      expect(result).toMatchObject({
        stdout: "out\n",
        stderr: "err\n",
        code: 3,
        outcome: "exited",
      });
      expect(result.stderrBytes).toBe(4);
      expect(rec.destroyed).toEqual(rec.started);
    },
  );

  check("cwd", "runs in /workspace by default", async () => {
    const { exec } = await setup();
    const result = await exec({ command: "pwd" });
    expect(result.stdout).toMatch(/\/workspace\n$/);
  });

  check("missing-cwd", "refuses a cwd the sandbox does not have, without creating it", async () => {
    const { bridge, rec } = await setup();
    const cwd = `/workspace/remote-task-missing-${freshId()}`;
    const response = await bridge(post("/exec", { sandboxId: freshId(), command: "pwd", cwd }));
    expect(response.status).toBe(400);
    const body = errorBodySchema.parse(await response.json());
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.[0]?.path).toEqual(["cwd"]);
    expect(body.error).toContain(cwd);
    expect(rec.destroyed).toEqual(rec.started);
  });

  check("bash", "runs commands with bash: [[ ... ]] and brace expansion work", async () => {
    const { exec } = await setup();
    const result = await exec({ command: "[[ a == a ]] && echo {x,y}" });
    expect(result).toMatchObject({ stdout: "x y\n", stderr: "", code: 0 });
  });

  check("output-cap", "caps retained output per stream and keeps exact byte totals", async () => {
    const cap = 100_000;
    const { exec, rec } = await setup({ maxOutputBytes: cap });
    const result = await exec({
      command: `yes | head -c ${largeBytes}; yes | head -c 10 >&2`,
      timeoutSeconds: 60,
    });
    expect(result.stdoutBytes).toBe(largeBytes);
    expect(result.stdoutTruncated).toBe(true);
    expect(new TextEncoder().encode(result.stdout).byteLength).toBe(cap);
    expect(result.stdout.endsWith("y\ny\n")).toBe(true);
    expect(result).toMatchObject({
      stderr: "y\ny\ny\ny\ny\n",
      stderrBytes: 10,
      stderrTruncated: false,
    });
    expect(rec.destroyed).toEqual(rec.started);
  });

  check(
    "stream-cap",
    "stops forwarding streamed output at the cap but reports the totals",
    async () => {
      const cap = 100_000;
      const { bridge } = await setup({ maxOutputBytes: cap });
      const response = await bridge(
        post(
          "/exec",
          { sandboxId: freshId(), command: `yes | head -c ${largeBytes}` },
          { stream: true },
        ),
      );
      expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
      const events = readStreamEvents(response);
      let forwarded = 0;
      let exit: ExecResult | undefined;
      for (let event = await events.next(); event; event = await events.next()) {
        if (event.type === "stdout") forwarded += new TextEncoder().encode(event.data).byteLength;
        if (event.type === "exit") exit = event.result;
      }
      expect(forwarded).toBe(cap);
      expect(exit).toMatchObject({ stdoutBytes: largeBytes, stdoutTruncated: true, code: 0 });
    },
  );

  check(
    "timeout",
    "kills a command at its deadline: outcome timeout, code 124, sandbox destroyed",
    async () => {
      const { exec, rec } = await setup();
      const started = Date.now();
      // 2 s: a real sandbox on a loaded machine must have started and printed by then.
      const result = await exec({ command: "echo before; sleep 30", timeoutSeconds: 2 });
      expect(result).toMatchObject({
        outcome: "timeout",
        code: TIMEOUT_EXIT_CODE,
        stdout: "before\n",
      });
      expect(Date.now() - started).toBeLessThan(startup + 10_000);
      expect(rec.destroyed).toEqual(rec.started);
    },
  );
}

/** How a call ends: cancelled, timed out, disconnected, streamed; and its stdin. */
function lifecycleChecks(suite: Suite): void {
  const { check, setup, startup } = suite;
  check("cancel", "cancels a running command through /cancel, idempotently", async () => {
    const { bridge, rec } = await setup();
    const { sandboxId, events } = await startSleeping(bridge);
    const cancel = await bridge(post("/cancel", { sandboxId }));
    expect(await cancel.json()).toEqual({ ok: true, sandboxId, cancelled: true });
    let exit: ExecResult | undefined;
    for (let event = await events.next(); event; event = await events.next()) {
      if (event.type === "exit") exit = event.result;
    }
    expect(exit).toMatchObject({ outcome: "cancelled", code: CANCELLED_EXIT_CODE });
    expect(rec.destroyed).toContain(sandboxId);
    const again = await bridge(post("/cancel", { sandboxId }));
    expect(await again.json()).toEqual({ ok: true, sandboxId, cancelled: false });
  });

  check(
    "conflict",
    "refuses a second concurrent call for the same sandbox id with 409 conflict",
    async () => {
      const { bridge } = await setup();
      const { sandboxId, events } = await startSleeping(bridge);
      const second = await bridge(post("/exec", { sandboxId, command: "echo no" }));
      expect(second.status).toBe(409);
      expect(errorBodySchema.parse(await second.json()).code).toBe("conflict");
      await bridge(post("/cancel", { sandboxId }));
      await events.cancel();
    },
  );

  check("stream-disconnect", "destroys the sandbox when a streaming client goes away", async () => {
    const { bridge, rec } = await setup();
    const { sandboxId, events } = await startSleeping(bridge);
    await events.cancel();
    await eventually(() => rec.destroyed.includes(sandboxId), startup, "destroy after disconnect");
    expect(bridge.activeCalls).toBe(0);
  });

  check(
    "request-abort",
    "destroys the sandbox when the request is aborted during a JSON call",
    async () => {
      const { bridge, rec } = await setup();
      const sandboxId = freshId();
      const controller = new AbortController();
      const pending = bridge(
        post("/exec", { sandboxId, command: "sleep 30" }, { signal: controller.signal }),
      );
      await eventually(() => rec.started.includes(sandboxId), startup, "start");
      controller.abort();
      await pending;
      await eventually(() => rec.destroyed.includes(sandboxId), startup, "destroy after abort");
    },
  );

  check(
    "heartbeat",
    "sends heartbeats during a quiet command and ends with the same result as JSON",
    async () => {
      const { bridge } = await setup({}, 100);
      const response = await bridge(
        post(
          "/exec",
          { sandboxId: freshId(), command: "echo a; sleep 1; echo b" },
          { stream: true },
        ),
      );
      const events = readStreamEvents(response);
      const seen: StreamEvent[] = [];
      for (let event = await events.next(); event; event = await events.next()) seen.push(event);
      expect(seen[0]?.type).toBe("start");
      expect(seen.filter((e) => e.type === "heartbeat").length).toBeGreaterThanOrEqual(2);
      const last = seen.at(-1);
      expect(last?.type).toBe("exit");
      if (last?.type === "exit") {
        expect(last.result).toMatchObject({ stdout: "a\nb\n", code: 0, outcome: "exited" });
      }
    },
  );

  check("stdin", "delivers stdin exactly, then end of input", async () => {
    const { exec, rec } = await setup();
    const text = "naïve 💥\nno newline at the end";
    expect(await exec({ command: "cat", stdin: text })).toMatchObject({ stdout: text, code: 0 });
    // Bytes that are not text: NUL and control bytes, sent as base64.
    const bytes = Uint8Array.from({ length: 128 }, (_, i) => i);
    const base64 = btoa(String.fromCharCode(...bytes));
    const result = await exec({ command: "cat", stdin: { base64 } });
    expect(result.stdoutBytes).toBe(128);
    expect(result.stdout).toBe(String.fromCharCode(...bytes));
    expect(rec.destroyed).toEqual(rec.started);
  });

  check("stdin", "is not held up by stdin the command never reads", async () => {
    const { exec } = await setup();
    const result = await exec({ command: "echo done", stdin: "x".repeat(1_000_000) });
    expect(result).toMatchObject({ stdout: "done\n", code: 0, outcome: "exited" });
  });
}
