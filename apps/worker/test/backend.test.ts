import { env } from "cloudflare:workers";
import { ContainerUnavailableError } from "@cloudflare/sandbox";
import {
  BackendError,
  type BridgeLogEntry,
  createBridge,
  type ExecSpec,
  type SandboxBackend,
} from "@remote-task/bridge";
import { describe, expect, it } from "vitest";
import { CloudflareSandboxBackend } from "../src/cloudflare-backend.js";
import { CONTAINERS_DISABLED_MESSAGE, toBackendError } from "../src/sandbox-sdk.js";
import { type FakeScenario, fakeCommand } from "./fake-sandbox.js";
import { expectDestroyed, sandboxId, sandboxState } from "./helpers.js";

function spec(overrides: Partial<ExecSpec> = {}): ExecSpec {
  return {
    sandboxId: sandboxId(),
    command: "pwd",
    cwd: "/workspace",
    env: {},
    timeoutMs: 5_000,
    signal: new AbortController().signal,
    ...overrides,
  };
}

function backend() {
  return new CloudflareSandboxBackend({ namespace: env.Sandbox, sleepAfter: "1m" });
}

/**
 * Destroys `id` through a bridge (a `/cancel` for an id with no call in flight destroys it) and
 * returns what the bridge logged: destroy failures are logged there, once.
 */
async function destroyThroughBridge(b: SandboxBackend, id: string): Promise<BridgeLogEntry[]> {
  const entries: BridgeLogEntry[] = [];
  const token = "t".repeat(16);
  const bridge = createBridge({ backend: b, token, logger: (entry) => entries.push(entry) });
  const answer = await bridge(
    new Request("http://bridge.test/cancel", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id }),
    }),
  );
  expect(answer.status).toBe(200);
  return entries;
}

async function run(scenario: FakeScenario, overrides: Partial<ExecSpec> = {}) {
  const b = backend();
  const s = spec({ command: fakeCommand(scenario), ...overrides });
  const running = await b.start(s);
  const chunks: Array<{ stream: string; data: string }> = [];
  for await (const chunk of running.output) {
    chunks.push({ stream: chunk.stream, data: String(chunk.data) });
  }
  const exit = await running.exit.then(
    (code) => ({ code }),
    (error: unknown) => ({ error }),
  );
  await b.destroy(s.sandboxId);
  return { chunks, exit, sandboxId: s.sandboxId };
}

describe("CloudflareSandboxBackend", () => {
  it("names itself and the isolation it provides", () => {
    expect(backend()).toMatchObject({ name: "cloudflare", isolation: "container" });
  });

  it("streams stdout and stderr in order and settles the exit code", async () => {
    const { chunks, exit, sandboxId } = await run({
      steps: [{ data: "a\n" }, { stream: "stderr", data: "b\n" }, { data: "c\n" }],
      exitCode: 7,
    });
    expect(chunks).toEqual([
      { stream: "stdout", data: "a\n" },
      { stream: "stderr", data: "b\n" },
      { stream: "stdout", data: "c\n" },
    ]);
    expect(exit).toEqual({ code: 7 });
    await expectDestroyed(sandboxId);
  });

  it("runs each command sessionless in a sandbox keyed by the exact id", async () => {
    const { sandboxId } = await run({});
    const state = await sandboxState(sandboxId);
    expect(state.execs[0]?.sessionId).toBe("__DISABLE_SESSION__");
    expect(state.configurations[0]).toMatchObject({
      sandboxName: { name: sandboxId, normalizeId: false },
      sleepAfter: "1m",
    });
  });

  it("starts the container on the control port within the call's timeout before sending the command", async () => {
    const { sandboxId } = await run({}, { timeoutMs: 8_000 });
    const state = await sandboxState(sandboxId);
    // Placement gets half of the budget (timeout less a margin), so "no instance" is reported
    // as capacity while the call can still answer it; the server's readiness the whole budget.
    expect(state.starts).toEqual([
      {
        ports: 3000,
        instanceGetTimeoutMS: 3_875,
        portReadyTimeoutMS: 7_750,
        enableInternet: false,
      },
    ]);
    expect(state.execs).toHaveLength(1);
  });

  it("declares the network policies it enforces: none and open, not an allowlist", () => {
    expect(backend().networkModes).toEqual(["none", "open"]);
  });

  it("starts each call's container with the internet on for open only", async () => {
    for (const [network, enableInternet] of [
      ["open", true],
      ["none", false],
      [undefined, false],
    ] as const) {
      const { sandboxId } = await run({}, { network });
      expect((await sandboxState(sandboxId)).starts, String(network)).toMatchObject([
        { enableInternet },
      ]);
    }
  });

  it("refuses an allowlist before anything starts (the bridge never sends one)", async () => {
    const b = backend();
    const s = spec({ network: { allow: ["pypi.org"] } });
    await expect(b.start(s)).rejects.toThrow("cannot hold a container to a host allowlist");
    await b.destroy(s.sandboxId);
    expect((await sandboxState(s.sandboxId)).starts).toEqual([]);
  });

  it("writes stdin outside /workspace, sessionless and as base64, and gives that file to the command", async () => {
    const bytes = new Uint8Array([0, 1, 2, 0xfe, 0xff, 10]);
    const { sandboxId, chunks } = await run({}, { stdin: bytes, command: "cat" });
    const state = await sandboxState(sandboxId);
    expect(state.files).toHaveLength(1);
    const [file] = state.files;
    expect(file?.path).toMatch(/^\/tmp\/\.remote-task-stdin-[0-9a-f-]{36}$/);
    expect(file).toMatchObject({ encoding: "base64", sessionId: "__DISABLE_SESSION__" });
    expect(file?.bytes).toEqual([...bytes]);
    expect(state.execs).toMatchObject([{ command: "cat", stdinFile: file?.path }]);
    // The fake's `cat` echoes the file the script opened (as text: it is a fake).
    expect(chunks.map((chunk) => chunk.data).join("")).toBe(new TextDecoder().decode(bytes));
  });

  it("writes no file and opens none when the call has no stdin", async () => {
    const { sandboxId } = await run({});
    const state = await sandboxState(sandboxId);
    expect(state.files).toEqual([]);
    expect(state.execs[0]?.stdinFile).toBeUndefined();
  });

  it("never sends the command when the call ends while the container starts", async () => {
    const controller = new AbortController();
    const b = backend();
    const s = spec({ signal: controller.signal });
    const starting = b.start(s);
    controller.abort();
    await expect(starting).rejects.toSatisfy(BackendError.isInstance);
    await b.destroy(s.sandboxId);
    const state = await sandboxState(s.sandboxId);
    expect(state.execs).toEqual([]);
    expect(state.destroyed).toBe(true);
  });

  it("keeps no per-id SDK state in the isolate: every handle configures its sandbox again", async () => {
    const { sandboxId } = await run({});
    const state = await sandboxState(sandboxId);
    // One configure for the command, one for the destroy: the SDK's per-namespace cache of
    // sandbox configurations (which would grow by one entry per call) was not used.
    expect(state.configurations).toHaveLength(2);
  });

  it("rejects the exit with sandbox_error when the SDK reports an error event", async () => {
    const { exit } = await run({ failMidStream: "event" }, { env: { K: "fake command" } });
    const error = (exit as { error: unknown }).error;
    expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    expect((error as Error).message).toContain("[redacted] crashed");
  });

  it("rejects the exit when the stream breaks or closes without an exit", async () => {
    for (const scenario of [
      { failMidStream: "throw" },
      { closeWithoutExit: true },
    ] satisfies FakeScenario[]) {
      const { exit } = await run(scenario);
      const error = (exit as { error: unknown }).error;
      expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    }
  });

  it("says a broken stream mid-command means the command's end is unknown", async () => {
    const { exit } = await run({ steps: [{ data: "partial\n" }], failMidStream: "throw" });
    const error = (exit as { error: unknown }).error;
    expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    expect((error as Error).message).toContain(
      "The connection to the sandbox broke while the command ran",
    );
  });

  it("stops reading and cancels the SDK stream when the signal aborts", async () => {
    const controller = new AbortController();
    const b = backend();
    const s = spec({
      command: fakeCommand({ endless: { data: "z", width: 1024 } }),
      signal: controller.signal,
    });
    const running = await b.start(s);
    let seen = 0;
    for await (const chunk of running.output) {
      seen += String(chunk.data).length;
      if (seen >= 8 * 1024) controller.abort();
    }
    await expect(running.exit).rejects.toSatisfy(BackendError.isInstance);
    await expect.poll(async () => (await sandboxState(s.sandboxId)).streamCancelled).toBe(true);
    await b.destroy(s.sandboxId);
  });

  it("refuses to start once the signal has aborted", async () => {
    const controller = new AbortController();
    controller.abort();
    await expect(backend().start(spec({ signal: controller.signal }))).rejects.toThrow();
  });

  it("maps a capacity failure at start to capacity_exceeded with a retry delay", async () => {
    const error = await backend()
      .start(spec({ command: fakeCommand({ startError: "capacity" }) }))
      .catch((e: unknown) => e);
    expect(BackendError.isInstance(error) && error.code).toBe("capacity_exceeded");
    expect((error as BackendError).details.retryAfterSeconds).toBeGreaterThan(0);
  });

  it("reports a failing destroy (the bridge logs it once), and is safe to repeat", async () => {
    const b = backend();
    const s = spec({ command: fakeCommand({ destroyFails: true }) });
    const running = await b.start(s);
    for await (const _ of running.output) {
      // drain
    }
    await expect(b.destroy(s.sandboxId)).rejects.toThrow("fake destroy failed");
    const entries = await destroyThroughBridge(b, s.sandboxId);
    expect((await sandboxState(s.sandboxId)).destroyCalls).toBe(2);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({
      event: "destroy_failed",
      level: "error",
      sandboxId: s.sandboxId,
      detail: expect.stringContaining("fake destroy failed"),
    });
  });

  it("destroys a sandbox that never started", async () => {
    const id = sandboxId();
    await backend().destroy(id);
    await expectDestroyed(id);
  });

  it("explains that containers need Docker or a deploy when the runtime has none", async () => {
    // `RealSandbox` is the SDK's own class in a runtime without containers, as in `wrangler dev`.
    const real = new CloudflareSandboxBackend({ namespace: env.RealSandbox });
    const id = sandboxId();
    const error = await real.start(spec({ sandboxId: id })).catch((e: unknown) => e);
    expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    expect((error as Error).message).toBe(CONTAINERS_DISABLED_MESSAGE);
    // Destroy fails there too: the bridge logs it, and nothing throws.
    const entries = await destroyThroughBridge(real, id);
    expect(entries[0]).toMatchObject({ event: "destroy_failed", sandboxId: id });
  });
});

describe("toBackendError", () => {
  const unavailable = (retryAfterMs?: number) =>
    new ContainerUnavailableError({
      code: "CONTAINER_UNAVAILABLE",
      message: "no container instance available",
      context: {
        reason: "no_container_instance_available",
        retryable: true,
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      },
      httpStatus: 503,
      timestamp: new Date(0).toISOString(),
    });

  it("maps the SDK's ContainerUnavailableError, keeping its retry delay", () => {
    const mapped = toBackendError(unavailable(2_500));
    expect(mapped.code).toBe("capacity_exceeded");
    expect(mapped.details.retryAfterSeconds).toBe(3);
    expect(toBackendError(unavailable()).details.retryAfterSeconds).toBe(10);
  });

  it("recognises capacity errors that crossed RPC as plain errors", () => {
    const plain = new Error("Maximum number of running container instances exceeded");
    expect(toBackendError(plain).code).toBe("capacity_exceeded");
    const named = Object.assign(new Error("x"), { name: "ContainerUnavailableError" });
    expect(toBackendError(named).code).toBe("capacity_exceeded");
    const coded = Object.assign(new Error("x"), { code: "CONTAINER_UNAVAILABLE" });
    expect(toBackendError(coded).code).toBe("capacity_exceeded");
  });

  it("turns anything else into sandbox_error without env values, shortened", () => {
    const mapped = toBackendError(
      Object.assign(new Error(`failed with hunter2 ${"x".repeat(1000)}`), { code: "EXEC_FAILED" }),
      { PASSWORD: "hunter2" },
    );
    expect(mapped.code).toBe("sandbox_error");
    expect(mapped.message).toContain("(EXEC_FAILED)");
    expect(mapped.message).not.toContain("hunter2");
    expect(mapped.message.length).toBeLessThan(400);
  });

  it("keeps a BackendError as it is", () => {
    const original = new BackendError("invalid_request", "bad cwd", { path: ["cwd"] });
    expect(toBackendError(original)).toBe(original);
  });
});
