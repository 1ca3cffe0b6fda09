import { referenceExecRequest, referenceExecResponse } from "@remote-task/protocol/fixtures";
import { afterEach, describe, expect, it } from "vitest";
import {
  AuthenticationError,
  BridgeError,
  createClient,
  formatOutput,
  InvalidRequestError,
} from "../src/index.js";
import { failure } from "./helpers/assertions.js";
import { startServer, type TestServer } from "./helpers/server.js";

/**
 * A minimal server speaking only the reference bridge's protocol: `{stdout, stderr, code}`,
 * `{error}`, `GET /health` -> `{ok: true}`, no `/cancel`, no streaming, Accept ignored.
 */
async function referenceBridge(
  token: string | undefined,
): Promise<TestServer & { bodies: unknown[] }> {
  const bodies: unknown[] = [];
  const send = (res: import("node:http").ServerResponse, status: number, value: unknown) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(value));
  };
  const server = await startServer((req, res, raw) => {
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      return send(res, 401, { error: "unauthorized" });
    }
    if (req.method === "GET" && req.url === "/health") return send(res, 200, { ok: true });
    if (req.method !== "POST" || req.url !== "/exec") return send(res, 404, { error: "not_found" });
    let body: { sandboxId?: string; command?: string };
    try {
      body = JSON.parse(raw);
    } catch {
      return send(res, 400, { error: "invalid_json" });
    }
    bodies.push(body);
    if (!body.sandboxId || !body.command) {
      return send(res, 400, { error: "sandboxId and command are required" });
    }
    if (body.command === "pwd") return send(res, 200, referenceExecResponse);
    if (body.command === "explode") return send(res, 500, { error: "Container crashed" });
    if (body.command === "quiet") return send(res, 200, { stdout: "", stderr: "", code: 0 });
    return send(res, 200, { stdout: "", stderr: `sh: ${body.command}: not found\n`, code: 127 });
  });
  return Object.assign(server, { bodies });
}

let server: (TestServer & { bodies: unknown[] }) | undefined;
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
    const client = createClient({ url: server.url, token: "right" });
    const crashed = await failure(client.run("explode"));
    expect(BridgeError.isInstance(crashed)).toBe(true);
    expect(crashed.message).toContain("Container crashed");
    // The reference bridge has no /cancel.
    expect(InvalidRequestError.isInstance(await failure(client.cancel("mikan-task-1")))).toBe(true);
    await Promise.all([wrong.close(), client.close()]);
  });
});
