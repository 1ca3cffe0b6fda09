import { ERROR_STATUS, type ErrorCode, execRequestSchema } from "@remote-task/protocol";
import { MockAgent } from "undici";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConnectionError, createClient, ProtocolError, TimeoutError } from "../src/index.js";
import { expectedErrorClass, failure } from "./helpers/assertions.js";
import { capacityBody, errorBody, fullHealth, fullResult, sse } from "./helpers/fixtures.js";

const ORIGIN = "http://bridge.mock";
let agent: MockAgent;

beforeEach(() => {
  agent = new MockAgent();
  agent.disableNetConnect();
});

afterEach(async () => {
  await agent.close();
});

function client(options: Record<string, unknown> = {}) {
  return createClient({
    url: ORIGIN,
    token: "mock-token",
    dispatcher: agent,
    retry: { initialDelayMs: 1, maxDelayMs: 2 },
    ...options,
  });
}

const json = { headers: { "content-type": "application/json" } };

describe("through an injected undici dispatcher", () => {
  it("runs a command and validates what it sends", async () => {
    let sent: unknown;
    agent
      .get(ORIGIN)
      .intercept({
        path: "/exec",
        method: "POST",
        headers: { authorization: "Bearer mock-token", accept: "application/json" },
        body: (body) => {
          sent = JSON.parse(body);
          return true;
        },
      })
      .reply(200, fullResult, json);
    const result = await client().run("echo hello");
    expect(execRequestSchema.parse(sent).sandboxId).toBe(result.sandboxId);
    expect(result.stdout).toBe(fullResult.stdout);
    agent.assertNoPendingInterceptors();
  });

  it("reads health", async () => {
    agent.get(ORIGIN).intercept({ path: "/health" }).reply(200, fullHealth, json);
    expect(await client().health()).toEqual(fullHealth);
  });

  it.each(Object.entries(ERROR_STATUS) as [ErrorCode, number][])(
    "maps %s (HTTP %i)",
    async (code, status) => {
      agent
        .get(ORIGIN)
        .intercept({ path: "/exec", method: "POST" })
        .reply(status, errorBody(code), json);
      const error = await failure(client({ retry: false }).run("x"));
      const expected = expectedErrorClass[code];
      expect(expected.isInstance(error)).toBe(true);
      expect([error.status, error.code]).toEqual([status, code]);
    },
  );

  it("retries 503 capacity_exceeded honouring the Retry-After date, then succeeds", async () => {
    const pool = agent.get(ORIGIN);
    const soon = new Date(Date.now() + 1000).toUTCString();
    pool
      .intercept({ path: "/exec", method: "POST" })
      .reply(503, capacityBody, { headers: { ...json.headers, "retry-after": soon } });
    pool.intercept({ path: "/exec", method: "POST" }).reply(200, fullResult, json);
    const delays: number[] = [];
    const result = await client({
      retry: {
        initialDelayMs: 1,
        onRetry: ({ delayMs }: { delayMs: number }) => delays.push(delayMs),
      },
    }).run("x");
    expect(result.exitCode).toBe(0);
    expect(delays).toHaveLength(1);
    // At most a second away (the date has whole seconds), plus up to a fifth of jitter.
    expect(delays[0]).toBeLessThanOrEqual(1200);
    agent.assertNoPendingInterceptors();
  });

  it("retries a refused connection (an error with code ECONNREFUSED)", async () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), {
      code: "ECONNREFUSED",
    });
    agent.get(ORIGIN).intercept({ path: "/exec", method: "POST" }).replyWithError(refused).times(3);
    const error = await failure(client({ retry: { maxAttempts: 3, initialDelayMs: 1 } }).run("x"));
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.cause).toBe(refused);
    agent.assertNoPendingInterceptors();
  });

  it("never re-sends after a reset", async () => {
    const pool = agent.get(ORIGIN);
    const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    pool.intercept({ path: "/exec", method: "POST" }).replyWithError(reset);
    pool.intercept({ path: "/exec", method: "POST" }).reply(200, fullResult, json);
    pool.intercept({ path: "/cancel", method: "POST" }).reply(200, (opts) => {
      const { sandboxId } = JSON.parse(String(opts.body));
      return { ok: true, sandboxId, cancelled: false };
    });
    const error = await failure(client().run("x"));
    expect(ConnectionError.isInstance(error)).toBe(true);
    // The second /exec interceptor is still pending: nothing was re-sent.
    expect(agent.pendingInterceptors().map((i) => i.path)).toContain("/exec");
  });

  it("a reply that never comes within the deadline is a TimeoutError", async () => {
    agent
      .get(ORIGIN)
      .intercept({ path: "/exec", method: "POST" })
      .reply(200, fullResult, json)
      .delay(5_000);
    agent
      .get(ORIGIN)
      .intercept({ path: "/cancel", method: "POST" })
      .reply(200, { ok: true, sandboxId: "a", cancelled: true }, json);
    // The reply comes after 5 s and would be a result: a TimeoutError means the deadline ended it.
    const error = await failure(client({ timeoutSeconds: 0.2, graceSeconds: 0.1 }).run("x"));
    expect(TimeoutError.isInstance(error)).toBe(true);
  });

  it("an HTML page and a wrong shape are ProtocolErrors", async () => {
    const pool = agent.get(ORIGIN);
    pool
      .intercept({ path: "/exec", method: "POST" })
      .reply(502, "<html>Bad gateway</html>", { headers: { "content-type": "text/html" } });
    pool.intercept({ path: "/exec", method: "POST" }).reply(200, { stdout: 1 }, json);
    const c = client();
    const html = await failure(c.run("x"));
    expect(ProtocolError.isInstance(html)).toBe(true);
    expect(html.status).toBe(502);
    const shape = (await failure(c.run("x"))) as ProtocolError;
    expect(shape.paths).toEqual(expect.arrayContaining([["stdout"], ["stderr"], ["code"]]));
  });

  it("streams SSE through undici", async () => {
    agent
      .get(ORIGIN)
      .intercept({ path: "/exec", method: "POST", headers: { accept: "text/event-stream" } })
      .reply(
        200,
        (opts) => {
          const { sandboxId } = JSON.parse(String(opts.body));
          return [
            sse({ type: "start", sandboxId, protocol: 1 }),
            sse({ type: "stdout", data: "hello\n" }),
            sse({ type: "exit", result: fullResult }),
          ].join("");
        },
        { headers: { "content-type": "text/event-stream" } },
      );
    const seen: string[] = [];
    const result = await client().run("x", { onOutput: (e) => seen.push(e.data) });
    expect(seen).toEqual(["hello\n"]);
    expect(result.stdout).toBe(fullResult.stdout);
  });

  it("close() leaves an injected dispatcher open", async () => {
    agent.get(ORIGIN).intercept({ path: "/health" }).reply(200, { ok: true }, json).times(2);
    const first = client();
    await first.health();
    await first.close();
    expect(await client().health()).toEqual({ ok: true });
  });
});
