import { env } from "cloudflare:workers";
import {
  BackendError,
  type BridgeLogEntry,
  createBridge,
  type ExecSpec,
  type SandboxBackend,
} from "@remote-task/bridge";
import { describe, expect, it } from "vitest";
import { CloudflareSandboxBackend } from "../src/cloudflare-backend.js";
import { CONTAINERS_DISABLED_MESSAGE, toBackendError } from "../src/container-client.js";
import { nextProbePause, PID1 } from "../src/task-container.js";
import { type FakeScenario, fakeCommand } from "./fake-container.js";
import { expectDestroyed, fakeNamespace, sandboxId, sandboxState } from "./helpers.js";

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
  return new CloudflareSandboxBackend({ namespace: env.TaskContainer, backstopMs: 60_000 });
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

function textOf(data: Uint8Array | string): string {
  return typeof data === "string" ? data : new TextDecoder().decode(data);
}

async function run(scenario: FakeScenario, overrides: Partial<ExecSpec> = {}) {
  const b = backend();
  const s = spec({ command: fakeCommand(scenario), ...overrides });
  const running = await b.start(s);
  const chunks: Array<{ stream: string; data: string }> = [];
  for await (const chunk of running.output) {
    chunks.push({ stream: chunk.stream, data: textOf(chunk.data) });
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

  it("runs each command in the container object keyed by the exact id, with its own PID 1", async () => {
    const { sandboxId } = await run({});
    const state = await sandboxState(sandboxId);
    expect(state.starts).toEqual([{ enableInternet: false, entrypoint: [...PID1] }]);
    expect(state.execs).toMatchObject([{ command: "fake {}", cwd: "/workspace" }]);
  });

  it("starts the container and waits until it runs a command before sending the call's", async () => {
    const { sandboxId } = await run({}, { timeoutMs: 8_000 });
    const state = await sandboxState(sandboxId);
    expect(state.probes).toBe(1);
    expect(state.execs).toHaveLength(1);
  });

  it("declares the network policies it enforces: none, an allowlist and open", () => {
    expect(backend().networkModes).toEqual(["none", "allow", "open"]);
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

  it("holds an allowlisted call's container to its gate: internet off, HTTP and HTTPS intercepted", async () => {
    const { sandboxId } = await run({}, { network: { allow: ["pypi.org"] } });
    const state = await sandboxState(sandboxId);
    expect(state.starts).toMatchObject([{ enableInternet: false }]);
    expect(state.intercepts).toEqual(["all-http", "https *"]);
    // The command is told where the interception's certificate authority is.
    expect(state.execs[0]?.envNames).toEqual(
      expect.arrayContaining(["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"]),
    );
  });

  it("intercepts nothing for none and open", async () => {
    for (const network of ["none", "open"] as const) {
      const { sandboxId } = await run({}, { network });
      expect((await sandboxState(sandboxId)).intercepts).toEqual([]);
    }
  });
});

describe("CloudflareSandboxBackend: stdin, output and one command per container", () => {
  it("streams stdin into the command's exec, bytes intact", async () => {
    const bytes = new Uint8Array([0, 1, 2, 0xfe, 0xff, 10]);
    const { sandboxId } = await run({}, { stdin: bytes, command: "cat" });
    const state = await sandboxState(sandboxId);
    expect(state.execs).toMatchObject([{ command: "cat", stdin: [...bytes] }]);
  });

  it("gives the command no stdin stream when the call has none", async () => {
    const { sandboxId } = await run({});
    expect((await sandboxState(sandboxId)).execs[0]?.stdin).toBeUndefined();
  });

  it("passes output bytes through exactly, invalid UTF-8 included", async () => {
    const b = backend();
    const s = spec({ command: "yes | head -c 70000" });
    const running = await b.start(s);
    let bytes = 0;
    for await (const chunk of running.output) {
      bytes += typeof chunk.data === "string" ? chunk.data.length : chunk.data.byteLength;
    }
    expect(await running.exit).toBe(0);
    expect(bytes).toBe(70_000);
    await b.destroy(s.sandboxId);
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

  it("never runs a second command in a container, nor starts one again", async () => {
    const { sandboxId } = await run({});
    const stub = fakeNamespace().get(fakeNamespace().idFromName(sandboxId));
    const again = await stub
      .run({ command: "pwd", cwd: "/", env: {}, nonce: "n", timeoutMs: 1_000, graceMs: 1 })
      .catch((error: unknown) => error);
    expect(String(again)).toContain("never reused");
    const restart = await stub
      .start({ network: "none", budgetMs: 1_000, backstopMs: 1_000 })
      .catch((error: unknown) => error);
    expect(String(restart)).toContain("never reused");
    expect((await sandboxState(sandboxId)).starts).toHaveLength(1);
  });
});

describe("CloudflareSandboxBackend: failures, aborts and destroy", () => {
  it("rejects the exit with sandbox_error when the exit code is lost, env values redacted", async () => {
    const { exit } = await run({ failMidStream: "event" }, { env: { K: "container" } });
    const error = (exit as { error: unknown }).error;
    expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    expect((error as Error).message).toContain("fake [redacted] connection lost");
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

  it("stops reading and cancels the command's output when the signal aborts", async () => {
    const controller = new AbortController();
    const b = backend();
    const s = spec({
      command: fakeCommand({ endless: { data: "z", width: 1024 } }),
      signal: controller.signal,
    });
    const running = await b.start(s);
    let seen = 0;
    for await (const chunk of running.output) {
      seen += textOf(chunk.data).length;
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

  it("destroys a sandbox that never started: a late start for it is refused", async () => {
    const id = sandboxId();
    await backend().destroy(id);
    const stub = fakeNamespace().get(fakeNamespace().idFromName(id));
    const late = await stub
      .start({ network: "none", budgetMs: 1_000, backstopMs: 1_000 })
      .catch((error: unknown) => error);
    expect(String(late)).toContain("never reused");
    expect((await sandboxState(id)).starts).toEqual([]);
  });

  it("explains that containers need Docker or a deploy when the runtime has none", async () => {
    // `RealTaskContainer` is the real class in a runtime without containers, as in `wrangler dev`.
    const real = new CloudflareSandboxBackend({ namespace: env.RealTaskContainer });
    const id = sandboxId();
    const error = await real.start(spec({ sandboxId: id })).catch((e: unknown) => e);
    expect(BackendError.isInstance(error) && error.code).toBe("sandbox_error");
    expect((error as Error).message).toBe(CONTAINERS_DISABLED_MESSAGE);
    // Destroy fails there too: the bridge logs it, and nothing throws.
    const entries = await destroyThroughBridge(real, id);
    expect(entries[0]).toMatchObject({ event: "destroy_failed", sandboxId: id });
    expect((entries[0] as { detail?: string }).detail).toContain("Containers are not available");
  });
});

describe("readiness probes", () => {
  it("pause half as long again after each refusal, up to a second", () => {
    const pauses = [100];
    for (let i = 0; i < 8; i++) pauses.push(nextProbePause(pauses.at(-1) as number));
    expect(pauses).toEqual([100, 150, 225, 338, 507, 761, 1000, 1000, 1000]);
  });
});

describe("toBackendError", () => {
  it("recognises the platform's capacity errors, which cross RPC as plain errors", () => {
    const plain = new Error("Maximum number of running container instances exceeded");
    expect(toBackendError(plain).code).toBe("capacity_exceeded");
    expect(toBackendError(plain).details.retryAfterSeconds).toBe(10);
    const coded = Object.assign(new Error("x"), {
      code: "CONTAINER_UNAVAILABLE",
      context: { retryAfterMs: 2_500 },
    });
    expect(toBackendError(coded).code).toBe("capacity_exceeded");
    expect(toBackendError(coded).details.retryAfterSeconds).toBe(3);
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
