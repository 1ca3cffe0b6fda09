/*
 * The Node host's connection limits under idle and slow sockets (loopback only, bounded): a flood
 * of idle connections cannot take `/health` or `/exec` down, a socket that never sends its
 * headers is closed, and none of the timeouts cuts a long answer.
 */
import { connect, type Socket } from "node:net";
import {
  type ConnectionLimitOptions,
  type EmbeddedBridge,
  startEmbeddedBridge,
} from "@remote-task/bridge/node";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { execResultSchema } from "@remote-task/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "./support/bridge.js";

const TOKEN = "connections-test-token-0123456789";

let bridge: EmbeddedBridge | undefined;
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await bridge?.close();
  bridge = undefined;
});

async function start(connections: ConnectionLimitOptions): Promise<EmbeddedBridge> {
  bridge = await startEmbeddedBridge({
    backend: createFakeBackend(),
    token: TOKEN,
    logger: () => {},
    connections,
  });
  return bridge;
}

/** Opens a socket to the bridge that sends nothing; resolves once connected (or refused). */
function idleSocket(url: string): Promise<{ socket: Socket; closed: () => boolean }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let closed = false;
    const socket = connect(Number(port), hostname);
    sockets.push(socket);
    socket.on("error", () => {});
    socket.on("close", () => {
      closed = true;
    });
    const done = () => resolve({ socket, closed: () => closed });
    socket.once("connect", done);
    socket.once("close", done);
  });
}

/** A fresh connection per request (no pool), as a new client would make. */
async function ask(url: string, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${url}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${TOKEN}`, connection: "close", ...init.headers },
    signal: AbortSignal.timeout(10_000),
  });
}

function exec(url: string, body: Record<string, unknown>, stream = false): Promise<Response> {
  return ask(url, "/exec", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(stream ? { accept: "text/event-stream" } : {}),
    },
    body: JSON.stringify(body),
  });
}

describe("the Node host's connection limits", () => {
  it("2,000 idle sockets against a cap of 500: /health and /exec still answer, the idle ones are closed", async () => {
    const { url } = await start({
      maxConnections: 500,
      headersTimeoutMs: 60_000,
      requestTimeoutMs: 60_000,
    });
    const idle: Array<{ closed: () => boolean }> = [];
    for (let i = 0; i < 2_000; i++) idle.push(await idleSocket(url));
    expect((await ask(url, "/health")).status).toBe(200);
    const answer = await exec(url, { sandboxId: "after-flood-1", command: "echo ran" });
    expect(execResultSchema.parse(await answer.json())).toMatchObject({ stdout: "ran\n", code: 0 });
    // The bridge held at most its cap: the rest were closed (evicted idle, or refused at accept).
    await waitFor(() => idle.filter((s) => !s.closed()).length <= 500, 10_000);
  }, 60_000);

  it("closes a socket that sends no headers within headersTimeoutMs (plus the 1 s check)", async () => {
    const { url } = await start({ headersTimeoutMs: 1_000, requestTimeoutMs: 1_000 });
    const silent = await idleSocket(url);
    // Without the timeout Node keeps such a socket for a minute (its own headersTimeout).
    await waitFor(silent.closed, 25_000);
    expect((await ask(url, "/health")).status).toBe(200);
  }, 30_000);

  it("cuts no answer: calls quiet for longer than every timeout still get their result, JSON and streamed", async () => {
    const { url } = await start({
      headersTimeoutMs: 1_000,
      requestTimeoutMs: 1_000,
      keepAliveTimeoutMs: 1_000,
    });
    const json = exec(url, { sandboxId: "long-json-1", command: "sleep 3; echo done" });
    const streamed = exec(url, { sandboxId: "long-sse-1", command: "sleep 3; echo done" }, true);
    expect(execResultSchema.parse(await (await json).json())).toMatchObject({
      stdout: "done\n",
      outcome: "exited",
    });
    const events = await (await streamed).text();
    expect(events).toContain('"type":"exit"');
    expect(events).toContain('"stdout":"done\\n"');
  }, 30_000);

  it("refuses connection limits that are not whole numbers, or a request timeout below the headers one", async () => {
    for (const connections of [
      { maxConnections: 0 },
      { headersTimeoutMs: 1.5 },
      { requestTimeoutMs: 1_000, headersTimeoutMs: 2_000 },
    ]) {
      await expect(
        startEmbeddedBridge({ backend: createFakeBackend(), connections }),
      ).rejects.toThrow(TypeError);
    }
  });
});
