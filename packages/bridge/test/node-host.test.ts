import { readdir, rm } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { execResultSchema, healthResponseSchema } from "@remote-task/protocol";
import { referenceExecRequest, referenceExecResponse } from "@remote-task/protocol/fixtures";
import { afterEach, describe, expect, it } from "vitest";
import type { ExecSpec, SandboxBackend } from "../src/index.js";
import { createLocalBackend } from "../src/local/index.js";
import { type EmbeddedBridge, startEmbeddedBridge } from "../src/node.js";
import { createFakeBackend } from "../src/testing/index.js";
import {
  events,
  eventually,
  expectError,
  freshId,
  leftoverCallDirs,
  makeTmpRoot,
  markedSleep,
  memoryLogger,
  processesWith,
} from "./helpers.js";
import { bwrap, bwrapRequired } from "./isolation.js";

const open: EmbeddedBridge[] = [];
afterEach(async () => {
  for (const bridge of open.splice(0)) await bridge.close();
});

async function start(options: Parameters<typeof startEmbeddedBridge>[0] = {}) {
  const bridge = await startEmbeddedBridge({ logger: memoryLogger(), ...options });
  open.push(bridge);
  return bridge;
}

function post(bridge: EmbeddedBridge, path: string, body: unknown, init: RequestInit = {}) {
  return fetch(`${bridge.url}${path}`, {
    method: "POST",
    ...init,
    headers: {
      authorization: `Bearer ${bridge.token}`,
      "content-type": "application/json",
      ...(init.headers as Record<string, string> | undefined),
    },
    body: JSON.stringify(body),
  });
}

/** A raw connection that sends `POST /exec` headers for a body of `length` bytes, and `sent` of them. */
function partialUpload(bridge: EmbeddedBridge, length: number, sent: string): Promise<Socket> {
  const { port } = new URL(bridge.url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), "127.0.0.1", () => {
      socket.write(
        `POST /exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${bridge.token}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n${sent}`,
      );
      resolve(socket);
    });
    socket.on("error", () => {});
  });
}

describe("startEmbeddedBridge: slow uploads and admission", () => {
  it("closes an upload slower than minUploadBytesPerSecond once it has had headersTimeoutMs", {
    timeout: 60_000,
  }, async () => {
    const bridge = await start({
      backend: createFakeBackend(),
      // Without the rate check nothing would close it before requestTimeoutMs, past this test's timeout.
      connections: {
        headersTimeoutMs: 500,
        requestTimeoutMs: 600_000,
        minUploadBytesPerSecond: 100,
      },
    });
    const slow = await partialUpload(bridge, 1_000, "{");
    const trickle = setInterval(() => {
      if (!slow.destroyed) slow.write(" ");
    }, 200);
    await new Promise<void>((resolve) => slow.once("close", () => resolve()));
    clearInterval(trickle);
    // A request that arrives at once is served.
    expect((await post(bridge, "/exec", { sandboxId: freshId(), command: "x" })).status).toBe(200);
  });

  it("near maxConnections closes uploads still arriving, slowest first, to make room", async () => {
    const bridge = await start({
      backend: createFakeBackend(),
      connections: { maxConnections: 20 },
    });
    const uploads: Socket[] = [];
    for (let i = 0; i < 25; i++) {
      uploads.push(await partialUpload(bridge, 1_000, "{"));
      // Its request under way (no longer an idle connection) before the next arrives.
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    const health = await fetch(`${bridge.url}/health`, {
      headers: { authorization: `Bearer ${bridge.token}` },
    });
    expect(health.status).toBe(200);
    expect(
      uploads.filter((upload) => upload.destroyed || upload.readableEnded).length,
    ).toBeGreaterThan(0);
    for (const upload of uploads) upload.destroy();
  });

  it("counts requests whose bodies are still arriving against admission", async () => {
    const bridge = await start({
      backend: createFakeBackend(),
      admission: { maxConcurrent: 1, maxQueued: 1, maxQueuedPerClient: 10 },
    });
    const uploads = [await partialUpload(bridge, 200, "{"), await partialUpload(bridge, 200, "{")];
    // Once the bridge has both requests' headers, their bodies fill the slot and the queue.
    let refused: unknown;
    await eventually(async () => {
      const answer = await post(bridge, "/exec", { sandboxId: freshId(), command: "x" });
      refused = await answer.json();
      return answer.status === 429;
    }, "a refusal while the two bodies are arriving");
    expect(refused).toMatchObject({ code: "capacity_exceeded" });
    const health = await fetch(`${bridge.url}/health`, {
      headers: { authorization: `Bearer ${bridge.token}` },
    });
    expect(health.status).toBe(200);
    for (const upload of uploads) upload.destroy();
    await eventually(async () => {
      const again = await post(bridge, "/exec", { sandboxId: freshId(), command: "x" });
      return again.status === 200;
    }, "room once the uploads are gone");
  });

  it("lets one client's calls take the free slots whatever its share of the queue", async () => {
    const bridge = await start({
      backend: createFakeBackend({ script: () => ({ exitDelayMs: 100 }) }),
      admission: { maxConcurrent: 4, maxQueued: 4, maxQueuedPerClient: 1 },
    });
    // One body still arriving from this address, a place in the queue's worth: slots are free.
    const upload = await partialUpload(bridge, 200, "{");
    await new Promise((resolve) => setTimeout(resolve, 100));
    const answer = await post(bridge, "/exec", { sandboxId: freshId(), command: "x" });
    expect(answer.status).toBe(200);
    upload.destroy();
  });

  it("counts a connection's source address as its client in the queue", async () => {
    const backend = createFakeBackend({ script: () => ({ hang: true }) });
    const bridge = await start({
      backend,
      admission: { maxConcurrent: 1, maxQueued: 4, maxQueuedPerClient: 1 },
    });
    const controller = new AbortController();
    const send = () =>
      post(bridge, "/exec", { sandboxId: freshId(), command: "x" }, { signal: controller.signal });
    const running = send().catch(() => undefined);
    await eventually(() => backend.starts.length === 1, "the first call runs");
    const waiting = send().catch(() => undefined);
    await eventually(async () => {
      const health = await fetch(`${bridge.url}/health`, {
        headers: { authorization: `Bearer ${bridge.token}` },
      });
      return healthResponseSchema.parse(await health.json()).admission?.queued === 1;
    }, "the second call waits");
    const refused = await send();
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({
      code: "capacity_exceeded",
      error: expect.stringContaining("This client already has 1 calls waiting"),
    });
    controller.abort();
    await Promise.all([running, waiting]);
  });
});

describe("startEmbeddedBridge", () => {
  it("listens on 127.0.0.1 on a random port with a random 256-bit token", async () => {
    const a = await start({ backend: createFakeBackend() });
    const b = await start({ backend: createFakeBackend() });
    expect(a.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(a.url).not.toBe(b.url);
    expect(a.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(a.token).not.toBe(b.token);
    const health = await fetch(`${a.url}/health`, {
      headers: { authorization: `Bearer ${a.token}` },
    });
    expect(healthResponseSchema.parse(await health.json()).backend).toBe("fake");
    expect((await fetch(`${a.url}/health`)).status).toBe(401);
  });

  it("uses the given token, host and port", async () => {
    const probe = await start({ backend: createFakeBackend() });
    const port = Number(new URL(probe.url).port);
    await probe.close();
    open.splice(open.indexOf(probe), 1);
    const bridge = await start({
      backend: createFakeBackend(),
      token: "my-token",
      host: "127.0.0.1",
      port,
    });
    expect(bridge.url).toBe(`http://127.0.0.1:${port}`);
    expect(bridge.token).toBe("my-token");
  });

  it.skipIf(!bwrap.ok && !bwrapRequired)(
    "answers the exact reference exchange from a real process in an isolated /workspace",
    async () => {
      const bridge = await start();
      expect(bridge.backend.isolation).toBe("bwrap");
      const response = await post(bridge, "/exec", referenceExecRequest);
      expect(response.status).toBe(200);
      const body = (await response.json()) as Record<string, unknown>;
      const { stdout, stderr, code } = body;
      expect({ stdout, stderr, code }).toEqual(referenceExecResponse);
      expect(execResultSchema.parse(body).outcome).toBe("exited");
    },
  );

  it("configures its default backend with `local`, reports it on /health and closes it", async () => {
    const tmpRoot = await makeTmpRoot("rt-node-local-");
    const bridge = await startEmbeddedBridge({
      logger: memoryLogger(),
      local: { isolation: "none", tmpRoot, limits: { memoryBytes: 256 * 1024 * 1024 } },
    });
    const health = healthResponseSchema.parse(
      await (
        await fetch(`${bridge.url}/health`, {
          headers: { authorization: `Bearer ${bridge.token}` },
        })
      ).json(),
    );
    expect(health).toMatchObject({
      isolation: "none",
      sandbox: { memoryBytes: { max: 256 * 1024 * 1024 } },
    });
    expect(await readdir(tmpRoot)).toHaveLength(1);
    await bridge.close();
    expect(await readdir(tmpRoot)).toEqual([]);
    await rm(tmpRoot, { recursive: true, force: true });
  });

  it("answers the reference request with the reference shape without isolation", async () => {
    const bridge = await start({ backend: createLocalBackend({ isolation: "none" }) });
    const result = execResultSchema.parse(
      await (await post(bridge, "/exec", referenceExecRequest)).json(),
    );
    expect(result).toMatchObject({ stderr: "", code: 0 });
    expect(result.stdout).toMatch(/\/workspace\n$/);
  });

  it("sends heartbeats over HTTP during a quiet command", async () => {
    const bridge = await start({
      heartbeatIntervalMs: 100,
      backend: createLocalBackend({ isolation: "none" }),
    });
    const response = await post(
      bridge,
      "/exec",
      { sandboxId: freshId(), command: "sleep 0.6; echo done" },
      { headers: { accept: "text/event-stream" } },
    );
    const all = await events(response).all();
    expect(all[0]?.type).toBe("start");
    expect(all.filter((e) => e.type === "heartbeat").length).toBeGreaterThanOrEqual(2);
    expect(all.at(-1)).toMatchObject({ type: "exit", result: { stdout: "done\n", code: 0 } });
  });

  it("kills the command when a JSON caller disconnects (no grace)", async () => {
    const backend = createLocalBackend({ isolation: "none" });
    const logger = memoryLogger();
    const bridge = await start({ backend, logger, durable: { disconnectGraceSeconds: 0 } });
    const { command, marker } = markedSleep();
    const controller = new AbortController();
    const pending = post(
      bridge,
      "/exec",
      { sandboxId: freshId(), command },
      { signal: controller.signal },
    );
    await eventually(() => processesWith(marker).length > 0, "command running");
    controller.abort();
    await expect(pending).rejects.toThrow();
    await eventually(() => backend.liveSandboxes() === 0, "sandbox destroyed");
    expect(processesWith(marker)).toEqual([]);
    await eventually(() => logger.entries.length === 1, "log line");
    expect(logger.entries[0]).toMatchObject({ outcome: "cancelled", endedBy: "disconnect" });
  });

  it("close() cancels calls in flight, destroys their sandboxes and stops listening", async () => {
    const backend = createLocalBackend({ isolation: "none", killGraceMs: 200 });
    const bridge = await startEmbeddedBridge({ backend, logger: memoryLogger() });
    const { command, marker } = markedSleep();
    const json = post(bridge, "/exec", { sandboxId: freshId(), command });
    const stream = await post(
      bridge,
      "/exec",
      { sandboxId: freshId(), command },
      { headers: { accept: "text/event-stream" } },
    );
    const reader = events(stream);
    expect((await reader.next())?.type).toBe("start");
    await eventually(() => backend.stats().started === 2, "both started");
    await bridge.close();
    expect(backend.liveSandboxes()).toBe(0);
    expect(processesWith(marker)).toEqual([]);
    await json.then(
      async (response) => expect(await response.json()).toMatchObject({ outcome: "cancelled" }),
      (error: unknown) => expect(error).toBeInstanceOf(Error),
    );
    await expect(fetch(`${bridge.url}/health`)).rejects.toThrow();
  });
});

describe("bounded output over HTTP", () => {
  it("prints 200 MB through the bridge: exact totals, retained tail within the cap", async () => {
    const backend = createLocalBackend({ isolation: "none" });
    const bridge = await start({ backend });
    const bytes = 200_000_000;
    const started = Date.now();
    const response = await post(bridge, "/exec", {
      sandboxId: freshId(),
      command: `head -c ${bytes} /dev/zero | tr '\\0' a; echo tail >&2`,
      timeoutSeconds: 120,
    });
    const result = execResultSchema.parse(await response.json());
    const seconds = (Date.now() - started) / 1000;
    expect(result).toMatchObject({
      code: 0,
      stdoutBytes: bytes,
      stdoutTruncated: true,
      stderr: "tail\n",
      stderrBytes: 5,
    });
    expect(result.stdout).toBe("a".repeat(1_048_576));
    console.info(`200 MB through the bridge in ${seconds.toFixed(1)} s`);
  }, 60_000);

  it("streams 200 MB: forwards at most the cap per stream, exit carries the totals", async () => {
    const bridge = await start({
      backend: createLocalBackend({ isolation: "none" }),
      limits: { maxOutputBytes: 100_000 },
    });
    const response = await post(
      bridge,
      "/exec",
      { sandboxId: freshId(), command: "head -c 200000000 /dev/zero | tr '\\0' b" },
      { headers: { accept: "text/event-stream" } },
    );
    let forwarded = 0;
    const all = events(response);
    let last: unknown;
    for (let e = await all.next(); e; e = await all.next()) {
      if (e.type === "stdout") forwarded += e.data.length;
      last = e;
    }
    expect(forwarded).toBe(100_000);
    expect(last).toMatchObject({
      type: "exit",
      result: { stdoutBytes: 200_000_000, stdoutTruncated: true, code: 0 },
    });
  }, 60_000);
});

describe("nothing left behind", () => {
  it("after a mixed batch: zero live sandboxes, no temp dirs, no processes", async () => {
    const tmpRoot = await makeTmpRoot("rt-leak-test-");
    const local = createLocalBackend({ isolation: "auto", tmpRoot, killGraceMs: 200 });
    // A backend that fails after starting the real process, to cover the backend-error path.
    const failing: SandboxBackend = {
      name: local.name,
      isolation: local.isolation,
      async start(spec: ExecSpec) {
        const running = await local.start(spec);
        if (!spec.command.includes("FAIL_AFTER_START")) return running;
        return {
          output: running.output,
          exit: Promise.reject(new Error("backend lost the sandbox")),
        };
      },
      destroy: (id) => local.destroy(id),
    };
    const bridge = await start({ backend: failing });
    const { command: sleep, marker } = markedSleep();
    const exec = (body: Record<string, unknown>, init?: RequestInit) =>
      post(bridge, "/exec", { sandboxId: freshId(), ...body }, init);

    const cancelId = freshId();
    const disconnect = new AbortController();
    const batch = await Promise.allSettled([
      exec({ command: "echo ok" }).then((r) => r.json()),
      exec({ command: "echo no >&2; exit 3" }).then((r) => r.json()),
      exec({ command: `${sleep} & ${sleep}`, timeoutSeconds: 0.5 }).then((r) => r.json()),
      exec({ command: `: FAIL_AFTER_START; ${sleep}` }).then((r) => r.json()),
      post(bridge, "/exec", { sandboxId: cancelId, command: sleep }).then((r) => r.json()),
      (async () => {
        const response = await exec(
          { command: `echo go; ${sleep}` },
          { headers: { accept: "text/event-stream" }, signal: disconnect.signal },
        );
        const reader = events(response);
        await reader.next();
        await reader.next();
        disconnect.abort();
        return "disconnected";
      })(),
      (async () => {
        await eventually(() => local.stats().started >= 6, "all started", 30_000);
        const response = await post(bridge, "/cancel", { sandboxId: cancelId });
        return response.json();
      })(),
    ]);
    const values = batch.map((b) => (b.status === "fulfilled" ? b.value : String(b.reason)));
    expect(values[0]).toMatchObject({ stdout: "ok\n", code: 0 });
    expect(values[1]).toMatchObject({ stderr: "no\n", code: 3 });
    expect(values[2]).toMatchObject({ outcome: "timeout", code: 124 });
    expect(values[3]).toMatchObject({ code: "sandbox_error" });
    expect(values[4]).toMatchObject({ outcome: "cancelled" });
    expect(values[5]).toBe("disconnected");
    expect(values[6]).toEqual({ ok: true, sandboxId: cancelId, cancelled: true });

    await eventually(() => local.liveSandboxes() === 0, "zero live sandboxes");
    expect(local.stats()).toMatchObject({ started: 6, destroyed: 6, live: 0 });
    await eventually(async () => (await leftoverCallDirs(local)).length === 0, "temp dirs removed");
    await eventually(() => processesWith(marker).length === 0, "no processes left");
    await local.close();
    expect(await readdir(tmpRoot)).toEqual([]);
    await rm(tmpRoot, { recursive: true, force: true });
  }, 60_000);
});

describe("errors over HTTP", () => {
  it("answers 413 for an oversized body streamed without Content-Length", async () => {
    const bridge = await start({ backend: createFakeBackend(), limits: { maxRequestBytes: 1024 } });
    const chunks = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 10; i++) controller.enqueue(new Uint8Array(1024).fill(0x20));
        controller.close();
      },
    });
    const response = await fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
      body: chunks,
      duplex: "half",
    } as RequestInit);
    await expectError(response, "payload_too_large");
  });

  it("logs nothing at error level when a client abandons its upload, and keeps serving", async () => {
    const logger = memoryLogger();
    const backend = createFakeBackend();
    const bridge = await start({ backend, logger });
    const { port } = new URL(bridge.url);
    for (let i = 0; i < 3; i++) {
      await new Promise<void>((resolve, reject) => {
        const socket = connect(Number(port), "127.0.0.1", () => {
          socket.write(
            `POST /exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${bridge.token}\r\n` +
              'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"sandboxId":',
            () => setTimeout(() => socket.destroy(), 50),
          );
        });
        socket.on("close", () => resolve());
        socket.on("error", reject);
      });
    }
    const health = await fetch(`${bridge.url}/health`, {
      headers: { authorization: `Bearer ${bridge.token}` },
    });
    expect(health.status).toBe(200);
    // The bridge reads the broken bodies after the sockets close: give it the time to.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(logger.entries).toEqual([]);
    expect(backend.starts).toEqual([]);
  });
});

/** Sends raw bytes and returns the raw HTTP answer. */
function rawRequest(url: string, text: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(text));
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      answer += chunk;
    });
    socket.on("end", () => resolve(answer));
    socket.on("error", reject);
  });
}

describe("malformed HTTP", () => {
  it("answers requests Node's parser or the Fetch adapter rejects with a protocol body", async () => {
    const bridge = await start({ backend: createFakeBackend() });
    for (const text of [
      "FROB /health HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: [bad\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nBad Header\r\n\r\n",
    ]) {
      const answer = await rawRequest(bridge.url, text);
      expect(answer, text).toMatch(/^HTTP\/1\.1 400 /);
      const body = answer.slice(answer.indexOf("\r\n\r\n") + 4);
      expect(JSON.parse(body), text).toMatchObject({ code: "invalid_request" });
    }
  });

  it("leaves the global Request and Response of the embedding program alone", async () => {
    const before = [globalThis.Request, globalThis.Response];
    await start({ backend: createFakeBackend() });
    expect([globalThis.Request, globalThis.Response]).toEqual(before);
  });
});
