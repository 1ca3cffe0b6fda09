import { afterEach, describe, expect, it } from "vitest";
import {
  AbortError,
  ConnectionError,
  createClient,
  type RetryInfo,
  TimeoutError,
} from "../src/index.js";
import { eventually, failure } from "./helpers/assertions.js";
import { fullResult, sse } from "./helpers/fixtures.js";
import { closedPort, type Handler, startServer, type TestServer } from "./helpers/server.js";

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

interface Seen {
  exec: string[];
  cancel: string[];
}

/**
 * A real loopback server: `/exec` handled by `exec`, `/cancel` answered and recorded, `/health`
 * answered as the reference bridge does (no durable calls: a dropped call is not re-attached).
 */
async function bridge(exec: Handler): Promise<{ url: string; seen: Seen }> {
  const seen: Seen = { exec: [], cancel: [] };
  server = await startServer((req, res, body) => {
    if (req.url === "/health") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true }));
      return;
    }
    if (req.url === "/cancel") {
      const { sandboxId } = JSON.parse(body);
      seen.cancel.push(sandboxId);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true, sandboxId, cancelled: true }));
      return;
    }
    seen.exec.push(JSON.parse(body).sandboxId);
    exec(req, res, body);
  });
  return { url: server.url, seen };
}

const quick = { timeoutSeconds: 0.3, graceSeconds: 0.2 };

describe("a real bridge that misbehaves (loopback)", () => {
  it("stalls before headers: TimeoutError, then cancel for the same id", async () => {
    const { url, seen } = await bridge(() => {});
    const error = await failure(createClient({ url, ...quick }).run("x"));
    expect(TimeoutError.isInstance(error)).toBe(true);
    await eventually(() => seen.cancel.length === 1);
    expect(seen.cancel).toEqual(seen.exec);
  });

  it("stalls mid-body: TimeoutError", async () => {
    const { url } = await bridge((_, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"stdout":"part');
    });
    expect(TimeoutError.isInstance(await failure(createClient({ url, ...quick }).run("x")))).toBe(
      true,
    );
  });

  it("stalls mid-stream: TimeoutError from the idle watchdog", async () => {
    const { url } = await bridge((_, res, body) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(sse({ type: "start", sandboxId: JSON.parse(body).sandboxId, protocol: 1 }));
    });
    const error = await failure(
      createClient({ url, idleTimeoutSeconds: 0.3 }).run("x", { onOutput: () => {} }),
    );
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/stopped receiving events/);
  });

  it("resets mid-response: ConnectionError, not re-sent", async () => {
    const { url, seen } = await bridge((_, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"stdout":"par');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const error = await failure(createClient({ url, retry: { initialDelayMs: 1 } }).run("x"));
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/broke while reading/);
    expect(seen.exec).toHaveLength(1);
  });

  it("resets before answering: ConnectionError, not re-sent (the command may have started)", async () => {
    const { url, seen } = await bridge((req) => req.socket.destroy());
    const error = await failure(createClient({ url, retry: { initialDelayMs: 1 } }).run("x"));
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(seen.exec).toHaveLength(1);
  });

  it("refused connections are retried within the budget, then a ConnectionError", async () => {
    const url = await closedPort();
    const retries: RetryInfo[] = [];
    const error = await failure(
      createClient({
        url,
        retry: { maxAttempts: 3, initialDelayMs: 1, onRetry: (i) => retries.push(i) },
      }).run("x"),
    );
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/ECONNREFUSED/);
    expect(retries.map((r) => r.attempt)).toEqual([1, 2]);
  });

  it("a capacity wait that would pass the call's deadline is not taken", async () => {
    const { url, seen } = await bridge((_, res) => {
      res.writeHead(503, { "content-type": "application/json", "retry-after": "5" });
      res.end(JSON.stringify({ error: "full", code: "capacity_exceeded", retryAfterSeconds: 5 }));
    });
    const error = await failure(createClient({ url, timeoutSeconds: 1, graceSeconds: 0 }).run("x"));
    // Waiting 5 s would pass the 1 s deadline (a TimeoutError); the client does not start the wait.
    expect(error.name).toBe("CapacityError");
    expect(seen.exec).toHaveLength(1);
  });

  it("the caller's abort cancels the remote command with the call's id", async () => {
    const { url, seen } = await bridge(() => {});
    const controller = new AbortController();
    const client = createClient({ url });
    const pending = client.run("sleep 60", { signal: controller.signal });
    await eventually(() => seen.exec.length === 1);
    controller.abort();
    expect(AbortError.isInstance(await failure(pending))).toBe(true);
    await eventually(() => seen.cancel.length === 1);
    expect(seen.cancel).toEqual(seen.exec);
    await client.close();
  });

  it("an abort before the answer's headers closes the call's connection (the bridge sees it end)", async () => {
    let requestClosed: Promise<void> | undefined;
    const { url, seen } = await bridge((req) => {
      requestClosed ??= new Promise((resolve) => req.socket.on("close", () => resolve()));
    });
    const controller = new AbortController();
    const client = createClient({ url });
    const pending = client.run("sleep 60", { signal: controller.signal });
    await eventually(() => seen.exec.length === 1);
    controller.abort();
    expect(AbortError.isInstance(await failure(pending))).toBe(true);
    // The client is still open: only the aborted request can have closed the connection.
    await requestClosed;
    await client.close();
  });

  it("reuses keep-alive connections across calls", async () => {
    const { url } = await bridge((_, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(fullResult));
    });
    const client = createClient({ url });
    for (let i = 0; i < 10; i++) await client.run("x");
    // undici may open a second socket while the first finishes its previous response.
    expect(server?.connections()).toBeLessThanOrEqual(2);
    await client.close();
  });
});
