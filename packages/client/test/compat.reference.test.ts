import { referenceExecRequest, referenceExecResponse } from "@remote-task/protocol/fixtures";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  AbortError,
  AuthenticationError,
  BridgeError,
  createClient,
  formatOutput,
} from "../src/index.js";
import { eventually, failure } from "./helpers/assertions.js";
import { startServer, type TestServer } from "./helpers/server.js";

/**
 * A minimal server speaking only the reference bridge's protocol: `{stdout, stderr, code}`,
 * `{error}`, `GET /health` -> `{ok: true}`, no `/cancel`, no streaming, Accept ignored.
 * `requests` lists each request as `METHOD /path` when it arrives and `METHOD /path STATUS`
 * when it is answered; the command `hang` is never answered.
 */
async function referenceBridge(token: string | undefined): Promise<ReferenceBridge> {
  const bodies: unknown[] = [];
  const requests: string[] = [];
  const server = await startServer((req, res, raw) => {
    const line = `${req.method} ${req.url}`;
    requests.push(line);
    const send = (status: number, value: unknown) => {
      requests.push(`${line} ${status}`);
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(value));
    };
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      return send(401, { error: "unauthorized" });
    }
    if (req.method === "GET" && req.url === "/health") return send(200, { ok: true });
    if (req.method !== "POST" || req.url !== "/exec") return send(404, { error: "not_found" });
    let body: { sandboxId?: string; command?: string };
    try {
      body = JSON.parse(raw);
    } catch {
      return send(400, { error: "invalid_json" });
    }
    bodies.push(body);
    if (!body.sandboxId || !body.command) {
      return send(400, { error: "sandboxId and command are required" });
    }
    if (body.command === "hang") return;
    if (body.command === "big") return send(200, { stdout: BIG_STDOUT, stderr: "", code: 0 });
    if (body.command === "pwd") return send(200, referenceExecResponse);
    if (body.command === "explode") return send(500, { error: "Container crashed" });
    if (body.command.startsWith("sleep ")) {
      // The SDK's exec throws at its timeout; the reference Worker answers 500 with its message.
      const ms = ((body as { timeoutSeconds?: number }).timeoutSeconds ?? 120) * 1000;
      return send(500, {
        error: `Failed to execute command '${body.command}' in session 'sandbox-${body.sandboxId}': Command timeout after ${ms}ms`,
      });
    }
    if (body.command === "quiet") return send(200, { stdout: "", stderr: "", code: 0 });
    return send(200, { stdout: "", stderr: `sh: ${body.command}: not found\n`, code: 127 });
  });
  return Object.assign(server, { bodies, requests });
}

type ReferenceBridge = TestServer & { bodies: unknown[]; requests: string[] };

/** 24 MiB of numbered lines: more than the 16 MiB the client once refused to read. */
const BIG_STDOUT = Array.from({ length: 24 * 1024 }, (_, i) => `${i}`.padEnd(1023, ".")).join("\n");

let server: ReferenceBridge | undefined;
afterEach(async () => {
  await server?.close();
});

describe("against a bridge that speaks only the reference shape", () => {
  it("runs, reads health, and treats the extensions as optional", async () => {
    server = await referenceBridge("ref-token");
    const client = createClient({ url: server.url, token: "ref-token", timeoutSeconds: 30 });
    expect(await client.health()).toEqual({ ok: true });
    const result = await client.run("pwd", { sandboxId: referenceExecRequest.sandboxId });
    // The request is exactly the reference client's.
    expect(server.bodies[0]).toEqual(referenceExecRequest);
    expect(result).toMatchObject({
      stdout: "/workspace\n",
      exitCode: 0,
      outcome: "exited",
      stdoutBytes: 11,
      stderrBytes: 0,
      stdoutTruncated: false,
    });
    expect(formatOutput(result).text).toBe("/workspace\n");
    const missing = await client.run("nope");
    expect(missing).toMatchObject({ exitCode: 127, outcome: "exited" });
    expect(formatOutput(await client.run("quiet")).text).toBe("(no output)");
    await client.close();
  });

  it("streams by replaying the JSON answer when the bridge ignores Accept", async () => {
    server = await referenceBridge(undefined);
    const client = createClient({ url: server.url });
    const chunks: string[] = [];
    const result = await client.run("nope", {
      onOutput: (e) => chunks.push(`${e.stream}:${e.data}`),
    });
    expect(chunks).toEqual(["stderr:sh: nope: not found\n"]);
    expect(result.exitCode).toBe(127);
    await client.close();
  });

  it("maps the reference {error} answers", async () => {
    server = await referenceBridge("right");
    const wrong = createClient({ url: server.url, token: "wrong" });
    const denied = await failure(wrong.run("pwd"));
    expect(AuthenticationError.isInstance(denied)).toBe(true);
    expect(denied.message).not.toContain("wrong");
    expect(denied.bridgeMessage).toBe("unauthorized");
    const client = createClient({ url: server.url, token: "right" });
    const crashed = await failure(client.run("explode"));
    expect(BridgeError.isInstance(crashed)).toBe(true);
    expect(crashed.message).toContain("Container crashed");
    expect(crashed.bridgeMessage).toBe("Container crashed");
    await Promise.all([wrong.close(), client.close()]);
  });

  it("its timeout (HTTP 500 with the SDK's text) is a timed-out result, code 124, in every mode", async () => {
    server = await referenceBridge(undefined);
    const client = createClient({ url: server.url, timeoutSeconds: 2 });
    const result = await client.run("sleep 100");
    expect(result).toMatchObject({ outcome: "timeout", exitCode: 124, stdout: "", stderr: "" });
    const streamed = await client.run("sleep 100", { onOutput: () => {} });
    expect(streamed).toMatchObject({ outcome: "timeout", exitCode: 124 });
    const [settled] = await client.runMany(["sleep 100"]);
    expect(settled?.status).toBe("fulfilled");
    // Another 500 stays a bridge failure.
    expect(BridgeError.isInstance(await failure(client.run("explode")))).toBe(true);
    await client.close();
  });

  it("a big output comes back as its tail with exact totals, and formats as the reference tool shows it", async () => {
    server = await referenceBridge(undefined);
    const client = createClient({ url: server.url });
    const result = await client.run("big");
    const total = Buffer.byteLength(BIG_STDOUT);
    expect(total).toBeGreaterThan(24 * 1024 * 1023);
    expect(result).toMatchObject({ exitCode: 0, stdoutBytes: total, stdoutTruncated: true });
    expect(BIG_STDOUT.endsWith(result.stdout)).toBe(true);
    expect(Buffer.byteLength(result.stdout)).toBe(1024 * 1024);
    const { text } = formatOutput(result);
    expect(
      text.endsWith(
        "\n\n[Showing the last 50.0KB of 24.0MB (50.0KB limit). Have the command summarise or filter its own output.]",
      ),
    ).toBe(true);
    expect(BIG_STDOUT.endsWith(text.slice(0, text.indexOf("\n\n[Showing")))).toBe(true);
    await client.close();
  });

  it("cancel resolves with supported: false: the reference bridge has no /cancel", async () => {
    server = await referenceBridge("right");
    const client = createClient({ url: server.url, token: "right" });
    expect(await client.cancel("mikan-task-1")).toEqual({
      sandboxId: "mikan-task-1",
      cancelled: false,
      supported: false,
    });
    expect(server.requests).toContain("POST /cancel 404");
    await client.close();
  });

  it("the background cancel after an abort neither throws nor logs there", async () => {
    server = await referenceBridge(undefined);
    const client = createClient({ url: server.url });
    const logged = vi.spyOn(console, "error");
    const warned = vi.spyOn(console, "warn");
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const controller = new AbortController();
      const pending = client.run("hang", { signal: controller.signal });
      await eventually(() => server?.requests.some((r) => r.startsWith("POST /exec")) === true);
      controller.abort();
      expect(AbortError.isInstance(await failure(pending))).toBe(true);
      await eventually(() => server?.requests.includes("POST /cancel 404") === true);
      await client.close();
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(unhandled).toEqual([]);
      expect(logged).not.toHaveBeenCalled();
      expect(warned).not.toHaveBeenCalled();
    } finally {
      process.off("unhandledRejection", onUnhandled);
      logged.mockRestore();
      warned.mockRestore();
    }
  });
});
