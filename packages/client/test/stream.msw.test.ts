import type { StreamEvent } from "@remote-task/protocol";
import { HttpResponse, http } from "msw";
import { describe, expect, it } from "vitest";
import {
  BridgeError,
  CapacityError,
  createClient,
  type OutputEvent,
  ProtocolError,
  type RemoteTaskError,
  TimeoutError,
} from "../src/index.js";
import { eventually, failure } from "./helpers/assertions.js";
import { errorBody, execResult, fullResult, sse } from "./helpers/fixtures.js";
import { hugeBody, mswFetch, type StreamStep, scriptedBody } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test";
const SSE_HEADERS = { "content-type": "text/event-stream" };

type Script = (sandboxId: string) => StreamStep[];

/** A bridge answering every streamed exec with `script`, and every cancel with `ok`. */
function streamingBridge(script: Script) {
  const bodies: ReturnType<typeof scriptedBody>[] = [];
  const f = mswFetch(
    http.post(`${URL_BASE}/exec`, async ({ request }) => {
      const { sandboxId } = (await request.json()) as { sandboxId: string };
      expect(request.headers.get("accept")).toBe("text/event-stream");
      const body = scriptedBody(script(sandboxId));
      bodies.push(body);
      return new HttpResponse(body, { headers: SSE_HEADERS });
    }),
    http.post(`${URL_BASE}/cancel`, async ({ request }) => {
      const { sandboxId } = (await request.json()) as { sandboxId: string };
      return HttpResponse.json({ ok: true, sandboxId, cancelled: true });
    }),
  );
  return { f, bodies };
}

const start = (sandboxId: string) => sse({ type: "start", sandboxId, protocol: 1 });
const exit = sse({ type: "exit", result: fullResult });

function client(f: typeof globalThis.fetch, options: Record<string, unknown> = {}) {
  return createClient({ url: URL_BASE, token: "tok-xyz", fetch: f, retry: false, ...options });
}

async function collect(iterable: AsyncIterable<StreamEvent>): Promise<StreamEvent[]> {
  const events: StreamEvent[] = [];
  for await (const event of iterable) events.push(event);
  return events;
}

const cancels = (f: { requests: Request[] }) => f.requests.filter((r) => r.url.endsWith("/cancel"));

describe("run with onOutput (SSE mode)", () => {
  it("delivers output as it arrives and returns the exit result", async () => {
    const { f } = streamingBridge((id) => [
      start(id),
      sse({ type: "stdout", data: "one\n" }),
      { waitMs: 20 },
      sse({ type: "stderr", data: "warn 💥\n" }),
      // One event split across chunks, and two events in one chunk.
      sse({ type: "stdout", data: "two\n" }).slice(0, 7),
      `${sse({ type: "stdout", data: "two\n" }).slice(7)}${sse({ type: "heartbeat", elapsedMs: 10 })}`,
      exit,
    ]);
    const seen: OutputEvent[] = [];
    const result = await client(f).run("x", { onOutput: (e) => seen.push(e) });
    expect(seen).toEqual([
      { stream: "stdout", data: "one\n" },
      { stream: "stderr", data: "warn 💥\n" },
      { stream: "stdout", data: "two\n" },
    ]);
    expect(result.stdout).toBe(fullResult.stdout);
    expect(result.sandboxId).toMatch(/^mikan-task-/);
    expect(result.outcome).toBe("exited");
  });

  it("says where the bridge skipped output for a reader that fell behind, in onOutput and stream()", async () => {
    const script: Script = (id) => [
      start(id),
      sse({ type: "stdout", data: "first\n" }),
      sse({ type: "stdout", data: "later\n", skippedBytes: 4096 }),
      sse({ type: "stderr", data: "", skippedBytes: 17 }),
      exit,
    ];
    const seen: OutputEvent[] = [];
    const result = await client(streamingBridge(script).f).run("x", {
      onOutput: (e) => seen.push(e),
    });
    expect(seen).toEqual([
      { stream: "stdout", data: "first\n" },
      { stream: "stdout", data: "later\n", skippedBytes: 4096 },
      { stream: "stderr", data: "", skippedBytes: 17 },
    ]);
    expect(result.stdout).toBe(fullResult.stdout);
    const events = await collect(client(streamingBridge(script).f).stream("x"));
    expect(events.filter((event) => event.type === "stdout" || event.type === "stderr")).toEqual([
      { type: "stdout", data: "first\n" },
      { type: "stdout", data: "later\n", skippedBytes: 4096 },
      { type: "stderr", data: "", skippedBytes: 17 },
    ]);
  });

  it("heartbeats keep a quiet command alive beyond the idle limit", async () => {
    const beats: StreamStep[] = [];
    // 12 x 80 ms is longer than the 0.5 s idle limit: only the heartbeats keep it alive.
    for (let i = 0; i < 12; i++)
      beats.push({ waitMs: 80 }, sse({ type: "heartbeat", elapsedMs: i * 80 }));
    const { f } = streamingBridge((id) => [start(id), ...beats, exit]);
    const result = await client(f, { idleTimeoutSeconds: 0.5 }).run("sleep", {
      onOutput: () => {},
    });
    expect(result.exitCode).toBe(0);
  });

  it("a stream that goes silent mid-way is a TimeoutError from the idle watchdog", async () => {
    const { f, bodies } = streamingBridge((id) => [
      start(id),
      sse({ type: "stdout", data: "a" }),
      "stall",
    ]);
    const error = await failure(
      client(f, { idleTimeoutSeconds: 0.2 }).run("x", { onOutput: () => {} }),
    );
    expect(TimeoutError.isInstance(error)).toBe(true);
    // The idle watchdog's words: the call's own deadline (120 s) did not end it.
    expect(error.message).toMatch(/stopped receiving events/);
    await eventually(() => cancels(f).length === 1);
    await eventually(() => bodies[0]?.cancelled() === true);
  });

  it("the overall deadline bounds a stream that keeps sending heartbeats", async () => {
    const beats: StreamStep[] = [];
    for (let i = 0; i < 100; i++)
      beats.push({ waitMs: 20 }, sse({ type: "heartbeat", elapsedMs: i }));
    const { f } = streamingBridge((id) => [start(id), ...beats, exit]);
    const error = await failure(
      client(f, { timeoutSeconds: 0.2, graceSeconds: 0.1 }).run("x", { onOutput: () => {} }),
    );
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/did not finish within/);
  });
});

describe("run with onOutput (SSE mode): errors and malformed streams", () => {
  it("an error event becomes its typed error and is not retried", async () => {
    const { f } = streamingBridge((id) => [
      start(id),
      sse({ type: "error", error: errorBody("sandbox_error") }),
    ]);
    const error = await failure(client(f).run("x", { onOutput: () => {} }));
    expect(BridgeError.isInstance(error)).toBe(true);
    expect(error.code).toBe("sandbox_error");
    expect(error.status).toBe(502);
    const capacity = streamingBridge(() => [
      sse({ type: "error", error: errorBody("capacity_exceeded", { retryAfterSeconds: 2 }) }),
    ]);
    const capacityError = await failure(
      createClient({ url: URL_BASE, fetch: capacity.f, retry: { initialDelayMs: 1 } }).run("x", {
        onOutput: () => {},
      }),
    );
    expect(CapacityError.isInstance(capacityError)).toBe(true);
    expect((capacityError as CapacityError).retryAfterSeconds).toBe(2);
    expect(capacity.f.requests.filter((r) => r.url.endsWith("/exec"))).toHaveLength(1);
  });

  it("a stream that ends without exit is a ProtocolError and the sandbox is cancelled", async () => {
    const { f } = streamingBridge((id) => [start(id), sse({ type: "stdout", data: "a" })]);
    const error = await failure(client(f).run("x", { onOutput: () => {} }));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/without an exit event/);
    await eventually(() => cancels(f).length === 1);
  });

  it("refuses a start event for a different sandbox", async () => {
    const { f } = streamingBridge(() => [start("someone-else"), exit]);
    const error = await failure(client(f).run("x", { onOutput: () => {} }));
    expect(ProtocolError.isInstance(error)).toBe(true);
  });

  it.each([
    ["data that is not JSON", "event: stdout\ndata: {not json\n\n"],
    [
      "an event of the wrong shape",
      'event: exit\ndata: {"type":"exit","result":{"stdout":""}}\n\n',
    ],
    [
      "a name that disagrees with the type",
      `event: stderr\ndata: {"type":"stdout","data":"x"}\n\n`,
    ],
  ])("%s is a ProtocolError", async (_, raw) => {
    const { f } = streamingBridge((id) => [start(id), raw, exit]);
    expect(
      ProtocolError.isInstance(await failure(client(f).run("x", { onOutput: () => {} }))),
    ).toBe(true);
  });

  it("skips event types this protocol version does not know", async () => {
    const { f } = streamingBridge((id) => [
      start(id),
      'event: progress\ndata: {"type":"progress","percent":5}\n\n',
      'data: {"type":"progress","percent":6}\n\n',
      ": a comment\n\n",
      exit,
    ]);
    const events = await collect(client(f).stream("x"));
    expect(events.map((e) => e.type)).toEqual(["start", "exit"]);
  });

  it("refuses one event larger than maxResponseBytes without buffering it all", async () => {
    const huge = hugeBody(100 * 1024 * 1024);
    const prefix = new TextEncoder().encode("event: stdout\ndata: ");
    let prefixed = false;
    const reader = huge.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (!prefixed) {
          prefixed = true;
          controller.enqueue(prefix);
          return;
        }
        const { done, value } = await reader.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel: () => reader.cancel(),
    });
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new HttpResponse(body, { headers: SSE_HEADERS })),
      http.post(`${URL_BASE}/cancel`, () =>
        HttpResponse.json({ ok: true, sandboxId: "a", cancelled: false }),
      ),
    );
    const error = await failure(
      client(f, { maxResponseBytes: 256 * 1024 }).run("x", { onOutput: () => {} }),
    );
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/larger than 256.0KB/);
    expect(huge.sent()).toBeLessThan(2 * 1024 * 1024);
  });

  it("a throwing onOutput ends the call with that very error and cancels", async () => {
    const { f } = streamingBridge((id) => [start(id), sse({ type: "stdout", data: "a" }), "stall"]);
    const boom = new Error("consumer failed");
    const error = await failure(
      client(f).run("x", {
        onOutput: () => {
          throw boom;
        },
      }),
    );
    expect(error).toBe(boom);
    await eventually(() => cancels(f).length === 1);
  });

  it("replays a JSON answer (a bridge without streaming) as events", async () => {
    const result = execResult({ stdout: "out\n", stderr: "err\n", code: 2 });
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json({ stdout: result.stdout, stderr: result.stderr, code: result.code }),
      ),
    );
    const seen: OutputEvent[] = [];
    const final = await client(f).run("x", { onOutput: (e) => seen.push(e) });
    expect(seen).toEqual([
      { stream: "stdout", data: "out\n" },
      { stream: "stderr", data: "err\n" },
    ]);
    expect(final).toMatchObject({ exitCode: 2, outcome: "exited", stdoutBytes: 4 });
    const events = await collect(client(f).stream("x"));
    expect(events.map((e) => e.type)).toEqual(["stdout", "stderr", "exit"]);
  });
});

describe("stream()", () => {
  it("yields the validated events and ends after exit", async () => {
    const { f } = streamingBridge((id) => [
      start(id),
      sse({ type: "stdout", data: "x" }),
      sse({ type: "heartbeat", elapsedMs: 1 }),
      exit,
      sse({ type: "stdout", data: "after exit" }),
      "stall",
    ]);
    const events = await collect(client(f).stream("x"));
    expect(events.map((e) => e.type)).toEqual(["start", "stdout", "heartbeat", "exit"]);
    expect(events[3]).toEqual({ type: "exit", result: fullResult });
    expect(cancels(f)).toHaveLength(0);
  });

  it("throws the typed error of an error event from the iterator", async () => {
    const { f } = streamingBridge((id) => [
      start(id),
      sse({ type: "error", error: errorBody("internal") }),
    ]);
    const seen: string[] = [];
    await expect(
      (async () => {
        for await (const event of client(f).stream("x")) seen.push(event.type);
      })(),
    ).rejects.toSatisfy((e) => BridgeError.isInstance(e));
    expect(seen).toEqual(["start"]);
  });

  it("breaking out of the loop stops the request and cancels the sandbox", async () => {
    const { f, bodies } = streamingBridge((id) => [
      start(id),
      sse({ type: "stdout", data: "first" }),
      "stall",
    ]);
    for await (const event of client(f).stream("x")) {
      if (event.type === "stdout") break;
    }
    await eventually(() => cancels(f).length === 1);
    const { sandboxId } = await (f.requests[0] as Request).json();
    expect(await (cancels(f)[0] as Request).json()).toEqual({ sandboxId });
    await eventually(() => bodies[0]?.cancelled() === true);
  });

  it("the caller's signal aborts a paused consumer too", async () => {
    const { f } = streamingBridge((id) => [start(id), "stall"]);
    const controller = new AbortController();
    const iterator = client(f).stream("x", { signal: controller.signal })[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toMatchObject({ type: "start" });
    controller.abort();
    await eventually(() => cancels(f).length === 1);
    await expect(iterator.next()).rejects.toSatisfy(
      (e: RemoteTaskError) => e.name === "AbortError",
    );
  });
});
