import {
  ConnectionError,
  createClient,
  ProtocolError,
  type RemoteTaskClient,
  type RemoteTaskError,
  type RetryInfo,
  TimeoutError,
} from "@remote-task/client";
import { PROTOCOL_VERSION } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestBridge, type TestBridge, waitFor } from "./support/bridge.js";
import { type Fault, FaultProxy, freePort, HEADERS_END } from "./support/fault-proxy.js";

const GRACE_SECONDS = 1;
const EXEC = /^POST \/exec /;
const CANCEL = /^POST \/cancel /;

let host: TestBridge;
let proxy: FaultProxy;
const clients: RemoteTaskClient[] = [];

beforeAll(async () => {
  host = await startTestBridge({ heartbeatIntervalMs: 200 });
  proxy = await FaultProxy.start(host.bridge.url);
});

afterAll(async () => {
  await proxy.close();
  // Whatever broke, no log line carried the token.
  expect(host.logs.lines.filter((line) => line.includes(host.bridge.token))).toEqual([]);
  expect(host.logs.entries.filter((entry) => entry.event === "internal_error")).toEqual([]);
  await host.close();
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  // No fault may leave a sandbox, a process or a directory behind.
  await host.settled();
  const stats = host.backend.stats();
  expect(stats.live).toBe(0);
  expect(stats.started).toBe(stats.destroyed);
  expect(await host.leftoverDirs()).toEqual([]);
});

interface Harness {
  client: RemoteTaskClient;
  retries: RetryInfo[];
}

function clientFor(url: string, idleTimeoutSeconds = 30): Harness {
  const retries: RetryInfo[] = [];
  const client = createClient({
    url,
    token: host.bridge.token,
    graceSeconds: GRACE_SECONDS,
    idleTimeoutSeconds,
    retry: {
      maxAttempts: 4,
      initialDelayMs: 50,
      maxDelayMs: 200,
      onRetry: (info) => retries.push(info),
    },
  });
  clients.push(client);
  return { client, retries };
}

/** Faults the /exec connections only; `/cancel` gets `cancelFault` (default: passes). */
function onExec(fault: Fault, cancelFault: Fault = { kind: "pass" }): void {
  proxy.setRule((line) => {
    if (EXEC.test(line)) return fault;
    if (CANCEL.test(line)) return cancelFault;
    return { kind: "pass" };
  });
}

/** Runs `call`, expecting it to fail; returns the error and how long the call took. */
async function failure(
  call: () => Promise<unknown>,
): Promise<{ error: RemoteTaskError; ms: number }> {
  const started = performance.now();
  try {
    await call();
  } catch (error) {
    return { error: error as RemoteTaskError, ms: performance.now() - started };
  }
  throw new Error("the call was expected to fail but succeeded");
}

async function drain(events: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of events) {
    // consume until the call ends
  }
}

function startedCount(): number {
  return host.backend.stats().started;
}

function execConnectionsSince(index: number) {
  return proxy.matching(EXEC).filter((connection) => connection.index >= index);
}

function lastExecLog() {
  const entries = host.logs.execEntries();
  return entries[entries.length - 1];
}

describe("fault proxy between the real client and a real bridge: refused and reset connections", () => {
  it("connection refused: retried within the budget, then a ConnectionError; nothing ran", async () => {
    const port = await freePort();
    const { client, retries } = clientFor(`http://127.0.0.1:${port}`);
    const before = startedCount();
    const { error } = await failure(() => client.run("echo never", { timeoutSeconds: 2 }));
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/nothing was sent/);
    expect(retries).toHaveLength(3);
    expect(startedCount()).toBe(before);
  });

  it("connection refused, then the bridge comes up: the retry succeeds and the command runs once", async () => {
    const port = await freePort();
    const retries: RetryInfo[] = [];
    const client = createClient({
      url: `http://127.0.0.1:${port}`,
      token: host.bridge.token,
      graceSeconds: GRACE_SECONDS,
      retry: {
        maxAttempts: 4,
        initialDelayMs: 100,
        maxDelayMs: 200,
        onRetry: (info) => retries.push(info),
      },
    });
    clients.push(client);
    const before = startedCount();
    // The first attempt is refused; the bridge comes up while the client backs off.
    const pending = client.run("echo once", { timeoutSeconds: 5 });
    await waitFor(() => retries.length >= 1, 5_000);
    const late = await FaultProxy.start(host.bridge.url, port);
    try {
      const result = await pending;
      expect(result.stdout).toBe("once\n");
      expect(ConnectionError.isInstance(retries[0]?.error)).toBe(true);
      expect(late.matching(EXEC)).toHaveLength(1);
      expect(startedCount()).toBe(before + 1);
    } finally {
      await late.close();
    }
  });

  it("reset before the request reached the bridge: ConnectionError, not re-sent (the client cannot know)", async () => {
    onExec({ kind: "reset-before-forward" });
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const before = startedCount();
    const { error } = await failure(() => client.run("echo hi", { timeoutSeconds: 2 }));
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(retries).toHaveLength(0);
    const execs = execConnectionsSince(mark);
    expect(execs).toHaveLength(1);
    expect(execs[0]?.forwardedBytes).toBe(0);
    expect(startedCount()).toBe(before);
  });

  it("reset after the request was forwarded: ConnectionError, never re-sent; the bridge sees the disconnect and destroys the sandbox", async () => {
    const before = startedCount();
    // The cancel is blocked too, so only the bridge's own disconnect handling can stop the command.
    onExec(
      {
        kind: "reset-after-forward",
        after: () => waitFor(() => startedCount() > before, 10_000),
      },
      { kind: "reset-before-forward" },
    );
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const { error } = await failure(() => client.run("sleep 30", { timeoutSeconds: 60 }));
    expect(ConnectionError.isInstance(error)).toBe(true);
    // It ended when the connection broke: a call that reached its 61 s deadline is a TimeoutError.
    expect(error.message).toMatch(/not re-sent/);
    expect(retries).toHaveLength(0);
    expect(execConnectionsSince(mark)).toHaveLength(1);
    expect(startedCount()).toBe(before + 1);
    // Far sooner than the 60 s server deadline: the bridge saw the client go away.
    await host.settled(15_000);
    expect(lastExecLog()?.endedBy).toBe("disconnect");
  });
});

describe("fault proxy between the real client and a real bridge: stalls, cut bodies and garbage", () => {
  it("stall before the response headers: TimeoutError at timeout + grace", async () => {
    onExec({ kind: "stall", marker: "", extra: 0 });
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const { error, ms } = await failure(() => client.run("echo hi", { timeoutSeconds: 1 }));
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(retries).toHaveLength(0);
    expect(execConnectionsSince(mark)).toHaveLength(1);
    expect(execConnectionsSince(mark)[0]?.deliveredBytes).toBe(0);
    expect(ms).toBeGreaterThanOrEqual((1 + GRACE_SECONDS) * 1000 - 50);
    expect(error.message).toMatch(/did not finish within 2s \(the task timeout plus the grace/);
  });

  it("stall mid-body: TimeoutError at timeout + grace", async () => {
    onExec({ kind: "stall", marker: HEADERS_END, extra: 100 });
    const { client } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const { error } = await failure(() =>
      client.run("head -c 20000 /dev/zero | tr '\\0' a", { timeoutSeconds: 1 }),
    );
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/did not finish within 2s \(the task timeout plus the grace/);
    expect(execConnectionsSince(mark)[0]?.deliveredBytes).toBeGreaterThan(100);
  });

  it("stall mid-stream (SSE): TimeoutError from the idle watchdog; the bridge sees the disconnect", async () => {
    // Heartbeats every 200 ms are swallowed too, so the client hears nothing after `start`.
    onExec(
      { kind: "stall", marker: `"protocol":${PROTOCOL_VERSION}}\n\n`, extra: 0 },
      { kind: "reset-before-forward" },
    );
    const { client } = clientFor(proxy.url, 1);
    const seen: string[] = [];
    const { error } = await failure(async () => {
      for await (const event of client.stream("echo started; sleep 30", { timeoutSeconds: 60 })) {
        seen.push(event.type);
      }
    });
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(seen).toEqual(["start"]);
    // The 1 s idle watchdog ended it, not the 61 s deadline (whose error says "did not finish").
    expect(error.message).toMatch(/stopped receiving events from the bridge for 1s/);
    await host.settled(15_000);
    expect(lastExecLog()?.endedBy).toBe("disconnect");
  });

  it("truncated body (closed mid-body): ConnectionError, not re-sent", async () => {
    onExec({ kind: "truncate", marker: HEADERS_END, extra: 100 });
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const { error } = await failure(() =>
      client.run("head -c 20000 /dev/zero | tr '\\0' a", { timeoutSeconds: 2 }),
    );
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/may have run/);
    expect(retries).toHaveLength(0);
    expect(execConnectionsSince(mark)).toHaveLength(1);
  });

  it("truncated stream (closed mid-SSE): ConnectionError, not re-sent; the bridge sees the disconnect", async () => {
    onExec(
      { kind: "truncate", marker: `"protocol":${PROTOCOL_VERSION}}\n\n`, extra: 0 },
      { kind: "reset-before-forward" },
    );
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const { error } = await failure(() =>
      drain(client.stream("echo started; sleep 30", { timeoutSeconds: 60 })),
    );
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/may have run/);
    expect(retries).toHaveLength(0);
    expect(execConnectionsSince(mark)).toHaveLength(1);
    await host.settled(15_000);
    expect(lastExecLog()?.endedBy).toBe("disconnect");
  });

  it("garbage bytes instead of HTTP: ProtocolError, not re-sent, nothing ran", async () => {
    onExec({
      kind: "garbage",
      bytes: Buffer.from("\u0000\u00ffSSH-2.0-not-http\r\n\r\n{]", "latin1"),
    });
    const { client, retries } = clientFor(proxy.url);
    const mark = proxy.connections.length;
    const before = startedCount();
    const { error } = await failure(() => client.run("echo hi", { timeoutSeconds: 2 }));
    // The answer arrived but is not HTTP: the protocol was violated, the connection did not break.
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(ConnectionError.isInstance(error)).toBe(false);
    expect(retries).toHaveLength(0);
    expect(execConnectionsSince(mark)).toHaveLength(1);
    expect(startedCount()).toBe(before);
  });

  it("slow trickle within the deadline: the JSON call succeeds", async () => {
    onExec({ kind: "trickle", delayMs: 2 });
    const { client } = clientFor(proxy.url);
    const result = await client.run("echo trickled; echo warn >&2; exit 3", { timeoutSeconds: 20 });
    expect(result).toMatchObject({
      stdout: "trickled\n",
      stderr: "warn\n",
      exitCode: 3,
      outcome: "exited",
    });
  });

  it("slow trickle within the deadline: the streamed call succeeds", async () => {
    onExec({ kind: "trickle", delayMs: 1 });
    const { client } = clientFor(proxy.url, 5);
    const output: string[] = [];
    const result = await client.run("echo one; echo two", {
      timeoutSeconds: 20,
      onOutput: (event) => output.push(event.data),
    });
    expect(result.exitCode).toBe(0);
    expect(output.join("")).toBe("one\ntwo\n");
  });
});

describe("client deadlines beyond the platform timer range", () => {
  it("a very long task timeout is sent to the bridge (which judges it), not turned into an instant TimeoutError", async () => {
    onExec({ kind: "pass" });
    const { client } = clientFor(proxy.url);
    // 1e7 s + grace is more ms than a timer can hold (2^31 - 1); the bridge allows at most 3600 s.
    const { error } = await failure(() => client.run("echo hi", { timeoutSeconds: 1e7 }));
    expect(TimeoutError.isInstance(error)).toBe(false);
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/timeoutSeconds/);
  });
});

describe("stream idle watchdog beyond the platform timer range", () => {
  it("a very long idle timeout does not end a quiet stream at once", async () => {
    onExec({ kind: "pass" });
    const { client } = clientFor(proxy.url, 1e7);
    const result = await client.run("sleep 0.3; echo late", {
      timeoutSeconds: 5,
      onOutput: () => {},
    });
    expect(result.stdout).toBe("late\n");
  });
});
