import { BRIDGE_TEXTS } from "@remote-task/internal";
import {
  ERROR_STATUS,
  type ErrorCode,
  execRequestSchema,
  TIMEOUT_EXIT_CODE,
  utf8ByteLength,
} from "@remote-task/protocol";
import { HttpResponse, http } from "msw";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  AbortError,
  AuthenticationError,
  BridgeError,
  CapacityError,
  ConnectionError,
  createClient,
  ForbiddenError,
  InvalidRequestError,
  ProtocolError,
  type RetryInfo,
  type RunOptions,
  TimeoutError,
} from "../src/index.js";
import { eventually, expectedErrorClass, failure } from "./helpers/assertions.js";
import {
  byteTail,
  capacityBody,
  errorBody,
  execResult,
  fullHealth,
  fullResult,
  invalidRequestBody,
  referenceHealth,
  referenceResult,
  timedOutResult,
} from "./helpers/fixtures.js";
import { hugeBody, mswFetch, stallingBody } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test/base";
const TOKEN = "tok-Secret-123";

function client(fetchImpl: typeof globalThis.fetch, options: Record<string, unknown> = {}) {
  return createClient({
    url: URL_BASE,
    token: TOKEN,
    fetch: fetchImpl,
    retry: { initialDelayMs: 1, maxDelayMs: 5 },
    ...options,
  });
}

const execRequests = (f: { requests: Request[] }) =>
  f.requests.filter((r) => new URL(r.url).pathname.endsWith("/exec"));
const cancelRequests = (f: { requests: Request[] }) =>
  f.requests.filter((r) => new URL(r.url).pathname.endsWith("/cancel"));

describe("run: successful answers", () => {
  it("sends a valid request with a fresh id and maps the full result", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    const c = client(f);
    const first = await c.run("echo hello", { env: { A: "1" }, maxOutputBytes: 1000 });
    const second = await c.run("echo hello");
    const [r1, r2] = execRequests(f);
    const body1 = execRequestSchema.parse(await r1?.json());
    const body2 = execRequestSchema.parse(await r2?.json());
    expect(body1).toMatchObject({
      command: "echo hello",
      cwd: "/workspace",
      timeoutSeconds: 120,
      env: { A: "1" },
      maxOutputBytes: 1000,
    });
    expect(body1.sandboxId).toMatch(/^mikan-task-[0-9a-f-]{36}$/);
    expect(body1.sandboxId).not.toBe(body2.sandboxId);
    expect(r1?.headers.get("authorization")).toBe(`Bearer ${TOKEN}`);
    expect(r1?.headers.get("content-type")).toBe("application/json");
    expect(first).toEqual({
      sandboxId: body1.sandboxId,
      stdout: fullResult.stdout,
      stderr: fullResult.stderr,
      exitCode: fullResult.code,
      outcome: fullResult.outcome,
      durationMs: fullResult.durationMs,
      stdoutBytes: fullResult.stdoutBytes,
      stderrBytes: fullResult.stderrBytes,
      stdoutTruncated: false,
      stderrTruncated: false,
    });
    expect(second.sandboxId).toBe(body2.sandboxId);
  });

  it("uses the configured prefix, cwd and timeout, and per-call overrides", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    const c = client(f, { idPrefix: "job", cwd: "/srv", timeoutSeconds: 7 });
    await c.run("a");
    await c.run("b", { cwd: "/tmp", timeoutSeconds: 3, sandboxId: "my-own-id" });
    const [a, b] = await Promise.all(execRequests(f).map((r) => r.json()));
    expect(a).toMatchObject({ cwd: "/srv", timeoutSeconds: 7 });
    expect(a.sandboxId).toMatch(/^job-[0-9a-f-]{36}$/);
    expect(b).toMatchObject({ cwd: "/tmp", timeoutSeconds: 3, sandboxId: "my-own-id" });
  });

  it("fills the reference shape's missing fields with sensible defaults", async () => {
    const unicode = execResult({ stdout: "héllo 💥\n", stderr: "warn\n" });
    const { stdout, stderr, code } = unicode;
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json({ stdout, stderr, code })),
    );
    const result = await client(f).run("x");
    expect(result).toMatchObject({
      stdout,
      stderr,
      exitCode: 0,
      outcome: "exited",
      stdoutBytes: utf8ByteLength(stdout),
      stderrBytes: 5,
      stdoutTruncated: false,
      stderrTruncated: false,
    });
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
    expect(utf8ByteLength(stdout)).toBe(12);
    const reference = await client(
      mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(referenceResult))),
    ).run("pwd");
    expect(reference.stdout).toBe(referenceResult.stdout);
  });

  it("keeps a non-zero exit and a timeout apart, both as values", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, async ({ request }) => {
        const { command } = (await request.json()) as { command: string };
        return HttpResponse.json(
          command === "fail" ? execResult({ code: 3, outcome: "exited" }) : timedOutResult,
        );
      }),
    );
    const c = client(f);
    const failed = await c.run("fail");
    expect(failed).toMatchObject({ exitCode: 3, outcome: "exited" });
    const timedOut = await c.run("sleep");
    expect(timedOut).toMatchObject({
      exitCode: TIMEOUT_EXIT_CODE,
      outcome: "timeout",
      stdoutTruncated: true,
    });
  });
});

describe("run: every error status", () => {
  it.each(Object.entries(ERROR_STATUS) as [ErrorCode, number][])(
    "%s (HTTP %i) becomes its error class, carrying status and code",
    async (code, status) => {
      const f = mswFetch(
        http.post(`${URL_BASE}/exec`, () =>
          HttpResponse.json(code === "invalid_request" ? invalidRequestBody : errorBody(code), {
            status,
          }),
        ),
      );
      const error = await failure(client(f, { retry: false }).run("x"));
      expect(expectedErrorClass[code].isInstance(error)).toBe(true);
      expect(error.status).toBe(status);
      expect(error.code).toBe(code);
      expect(error.bridgeMessage).toBe(
        code === "invalid_request" ? invalidRequestBody.error : `bridge says ${code}`,
      );
      expect(error.sandboxId).toMatch(/^mikan-task-/);
      expect(execRequests(f)).toHaveLength(1);
    },
  );

  it("carries the bridge's issues on InvalidRequestError", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(invalidRequestBody, { status: 400 })),
    );
    const error = await failure(client(f).run("x"));
    expect(InvalidRequestError.isInstance(error)).toBe(true);
    expect((error as InvalidRequestError).issues).toEqual(invalidRequestBody.issues);
    expect(error.message).toContain("command: command must not be empty");
  });

  it("tells the deployer to set a token for not_configured", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json(errorBody("not_configured"), { status: 503 }),
      ),
    );
    const error = await failure(client(f).run("x"));
    expect(BridgeError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/no token configured/);
    expect(execRequests(f)).toHaveLength(1);
  });

  it("says which secret the bridge cannot read, and that the command did not run", async () => {
    const words = BRIDGE_TEXTS.secretUnavailable("GH_TOKEN");
    const f = mswFetch(
      // A call with secrets asks /health first (a bridge that knows them, protocol 3).
      http.get(`${URL_BASE}/health`, () => HttpResponse.json(fullHealth)),
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json({ error: words, code: "not_configured" }, { status: 503 }),
      ),
    );
    const error = await failure(client(f).run("x", { secrets: ["GH_TOKEN"] }));
    expect(BridgeError.isInstance(error)).toBe(true);
    expect(error.message).toContain("cannot use a secret this call asks for");
    expect(error.message).toContain("value of secret GH_TOKEN");
    expect(error.message).not.toMatch(/token configured/);
    expect((error as BridgeError).mayHaveRun).toBe(false);
  });

  it("points a refusal of undeclared secrets at the secrets /health lists, not the network ceiling", async () => {
    const words = BRIDGE_TEXTS.secretsUndeclared("AWS_KEY", "GH_TOKEN");
    const f = mswFetch(
      // A call with secrets asks /health first (a bridge that knows them, protocol 3).
      http.get(`${URL_BASE}/health`, () => HttpResponse.json(fullHealth)),
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json({ error: words, code: "forbidden" }, { status: 403 }),
      ),
    );
    const error = await failure(client(f).run("x", { secrets: ["AWS_KEY"] }));
    expect(ForbiddenError.isInstance(error)).toBe(true);
    expect(error.message).toContain("refused the call's secrets");
    expect(error.message).toContain("it declares GH_TOKEN");
    expect(error.message).not.toContain("network.ceiling");
  });

  it.each([
    [401, AuthenticationError, "unauthorized"],
    [403, AuthenticationError, "invalid_request"],
    [400, InvalidRequestError, "invalid_request"],
    [404, InvalidRequestError, "not_found"],
    [413, InvalidRequestError, "payload_too_large"],
    [422, InvalidRequestError, "invalid_request"],
    [500, BridgeError, "internal"],
    [502, BridgeError, "sandbox_error"],
    [503, BridgeError, "internal"],
  ])("accepts the reference {error} body at HTTP %i", async (status, cls, code) => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json({ error: "reference says no" }, { status }),
      ),
    );
    const error = await failure(client(f).run("x"));
    expect(cls.isInstance(error)).toBe(true);
    expect(error.code).toBe(code);
    expect(error.message).toContain("reference says no");
    expect(error.bridgeMessage).toBe("reference says no");
    // A plain 503 without `capacity_exceeded` may have run: never retried.
    expect(execRequests(f)).toHaveLength(1);
  });
});

describe("run: the bridge's own words (bridgeMessage)", () => {
  const answer = (status: number, body: string) =>
    mswFetch(http.post(`${URL_BASE}/exec`, () => new HttpResponse(body, { status })));

  it("keeps the whole text, with the token and env values redacted; the message shortens it", async () => {
    const words = `worker said: ${TOKEN} and env-s3cret-value, then ${"x".repeat(2000)}`;
    const f = answer(500, JSON.stringify({ error: words }));
    const error = await failure(client(f).run("x", { env: { V: "env-s3cret-value" } }));
    expect(error.bridgeMessage).toBe(
      `worker said: [redacted] and [redacted], then ${"x".repeat(2000)}`,
    );
    expect(error.message).not.toContain(TOKEN);
    expect(error.message.length).toBeLessThan(1000);
  });

  it.each([
    [401, "", AuthenticationError, undefined],
    [502, "  \n", BridgeError, undefined],
    [500, "{}", BridgeError, undefined],
    [400, '{"error":""}', InvalidRequestError, undefined],
    [503, '{"stdout":"","stderr":"sandbox gone\\n","code":1}', BridgeError, "sandbox gone\n"],
    [500, '{"error":"","stderr":"from stderr"}', BridgeError, "from stderr"],
    [404, '["not", "an object"]', InvalidRequestError, undefined],
  ])(
    "an answer with status %i and body %j: the status says what failed",
    async (status, body, cls, words) => {
      const error = await failure(client(answer(status, body), { retry: false }).run("x"));
      expect(cls.isInstance(error)).toBe(true);
      expect(error.status).toBe(status);
      expect(error.bridgeMessage).toBe(words);
    },
  );

  it("is undefined when the failure is not the bridge's answer", async () => {
    const html = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.html("<h1>Bad Gateway</h1>", { status: 502 }),
      ),
    );
    const notJson = await failure(client(html).run("x"));
    expect(ProtocolError.isInstance(notJson)).toBe(true);
    expect(notJson.bridgeMessage).toBeUndefined();
    const refused = await failure(client(mswFetch(), { retry: false }).run("x"));
    expect(ConnectionError.isInstance(refused)).toBe(true);
    expect(refused.bridgeMessage).toBeUndefined();
  });
});

describe("run: malformed and hostile bodies", () => {
  const html = "<!doctype html><html><body><h1>502 Bad Gateway</h1></body></html>";

  it("an HTML error page is a ProtocolError with the status", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.html(html, { status: 502 })),
    );
    const error = await failure(client(f).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.status).toBe(502);
    expect(error.message).toContain("text/html");
    expect(execRequests(f)).toHaveLength(1);
  });

  it("an HTML page with status 200 is a ProtocolError", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.html(html)));
    const error = await failure(client(f).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.status).toBe(200);
  });

  it("truncated JSON is a ProtocolError", async () => {
    const text = JSON.stringify(fullResult);
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.text(text.slice(0, text.length - 5), {
          headers: { "content-type": "application/json" },
        }),
      ),
    );
    expect(ProtocolError.isInstance(await failure(client(f).run("x")))).toBe(true);
  });

  it("wrong types are a ProtocolError naming the paths", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json({ ...fullResult, code: "0", outcome: "crashed" }),
      ),
    );
    const error = (await failure(client(f).run("x"))) as ProtocolError;
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.paths).toEqual(expect.arrayContaining([["code"], ["outcome"]]));
    expect(error.message).toMatch(/code: .*outcome: /);
  });

  it("a 100 MB body that is not JSON is refused without reading it all", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(
      http.post(
        `${URL_BASE}/exec`,
        () => new HttpResponse(body, { headers: { "content-type": "application/json" } }),
      ),
    );
    const error = await failure(client(f, { maxResponseBytes: 1024 * 1024 }).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/HTTP 200 with a body that is not protocol JSON/);
    expect(body.sent()).toBeLessThan(4 * 1024 * 1024);
  });

  it("a health answer over maxResponseBytes is refused without reading it all", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(http.get(`${URL_BASE}/health`, () => new HttpResponse(body)));
    const error = await failure(client(f, { maxResponseBytes: 1024 * 1024 }).health());
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/larger than the 1.0MB limit/);
    expect(body.sent()).toBeLessThan(4 * 1024 * 1024);
  });

  it("a declared Content-Length over the limit is not buffered: a body that is not JSON fails at once", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(
      http.post(
        `${URL_BASE}/exec`,
        () =>
          new HttpResponse(body, {
            headers: {
              "content-type": "application/json",
              "content-length": String(100 * 1024 * 1024),
            },
          }),
      ),
    );
    const error = await failure(client(f, { maxResponseBytes: 1024 * 1024 }).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/not protocol JSON/);
    expect(body.sent()).toBeLessThan(1024 * 1024);
  });

  it("the default limit is 16 MiB", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(http.get(`${URL_BASE}/health`, () => new HttpResponse(body)));
    const error = await failure(client(f).health());
    expect(error.message).toMatch(/16.0MB limit/);
    expect(body.sent()).toBeLessThan(20 * 1024 * 1024);
    // An exec result is read whole up to 4 MiB (or this limit when lower), then as it arrives.
    const exec = hugeBody(100 * 1024 * 1024);
    const g = mswFetch(http.post(`${URL_BASE}/exec`, () => new HttpResponse(exec)));
    expect(ProtocolError.isInstance(await failure(client(g).run("x")))).toBe(true);
    expect(exec.sent()).toBeGreaterThan(4 * 1024 * 1024);
    expect(exec.sent()).toBeLessThan(8 * 1024 * 1024);
  });

  it("a huge error body is not buffered either", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new HttpResponse(body, { status: 500 })),
    );
    const error = await failure(client(f).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.status).toBe(500);
    expect(body.sent()).toBeLessThan(1024 * 1024);
  });

  it("a redirect is not followed", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.redirect("https://elsewhere.test/exec", 307),
      ),
      http.post("https://elsewhere.test/exec", () => HttpResponse.json(fullResult)),
    );
    const error = await failure(client(f).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/redirect/);
    expect(f.requests).toHaveLength(1);
  });

  it("never puts the token or env values in messages, even when the bridge echoes them", async () => {
    const envValue = "env-value-Sensitive";
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json(
          errorBody("invalid_request", {
            error: `bad token ${TOKEN} and ${envValue}`,
            issues: [{ path: ["env", "A"], message: `value ${envValue} refused` }],
          }),
          { status: 400 },
        ),
      ),
    );
    const error = (await failure(
      client(f).run("x", { env: { A: envValue } }),
    )) as InvalidRequestError;
    expect(error.message).toContain("[redacted]");
    for (const text of [error.message, JSON.stringify(error.issues), String(error.stack)]) {
      expect(text).not.toContain(TOKEN);
      expect(text).not.toContain(envValue);
    }
  });
});

describe("run: answers larger than maxResponseBytes (a bridge that caps nothing)", () => {
  const MiB = 1024 * 1024;
  /** A reference-shaped answer with `stdoutBytes` of numbered lines, sent chunk by chunk. */
  function bigAnswer(stdoutBytes: number, declareLength: boolean) {
    const line = 'line of output with a tab\t, a quote " and é\n';
    const stdout = line.repeat(Math.ceil(stdoutBytes / utf8ByteLength(line)));
    const text = JSON.stringify({ stdout, stderr: "warning: big\n", code: 3 });
    const bytes = new TextEncoder().encode(text);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (declareLength) headers["content-length"] = String(bytes.byteLength);
    const body = () =>
      new ReadableStream<Uint8Array>({
        start(controller) {
          for (let i = 0; i < bytes.byteLength; i += 64 * 1024) {
            controller.enqueue(bytes.subarray(i, i + 64 * 1024));
          }
          controller.close();
        },
      });
    return { stdout, size: bytes.byteLength, respond: () => new HttpResponse(body(), { headers }) };
  }

  it.each([
    ["declared", true],
    ["chunked", false],
  ])("returns the tail of each output with exact totals (length %s)", async (_, declared) => {
    const answer = bigAnswer(3 * MiB, declared);
    const f = mswFetch(http.post(`${URL_BASE}/exec`, answer.respond));
    const result = await client(f, { maxResponseBytes: MiB }).run("x");
    expect(answer.size).toBeGreaterThan(3 * MiB);
    expect(result).toMatchObject({
      exitCode: 3,
      outcome: "exited",
      stdout: byteTail(answer.stdout, MiB),
      stdoutBytes: utf8ByteLength(answer.stdout),
      stdoutTruncated: true,
      stderr: "warning: big\n",
      stderrBytes: 13,
      stderrTruncated: false,
    });
  });

  it("keeps the call's maxOutputBytes of each output, whether the answer is read whole or not", async () => {
    const answer = bigAnswer(3 * MiB, false);
    const f = mswFetch(http.post(`${URL_BASE}/exec`, answer.respond));
    const asItArrives = await client(f, { maxResponseBytes: MiB }).run("x", {
      maxOutputBytes: 100_000,
    });
    expect(asItArrives.stdout).toBe(byteTail(answer.stdout, 100_000));
    expect(asItArrives.stdoutBytes).toBe(utf8ByteLength(answer.stdout));
    expect(asItArrives.stdoutTruncated).toBe(true);
    const whole = await client(f).run("x", { maxOutputBytes: 100_000 });
    expect({ ...whole, durationMs: 0, sandboxId: "" }).toEqual({
      ...asItArrives,
      durationMs: 0,
      sandboxId: "",
    });
    const fits = await client(f).run("x", { maxOutputBytes: 4 * MiB });
    expect(fits.stdout).toBe(answer.stdout);
    expect(fits.stdoutTruncated).toBe(false);
  });

  it("keeps 1 MiB of each output by default, as a remote-task bridge does", async () => {
    const answer = bigAnswer(3 * MiB, true);
    const f = mswFetch(http.post(`${URL_BASE}/exec`, answer.respond));
    const result = await client(f).run("x");
    expect(result.stdout).toBe(byteTail(answer.stdout, MiB));
    expect(result.stdoutBytes).toBe(utf8ByteLength(answer.stdout));
    expect(result.stdoutTruncated).toBe(true);
  });

  it("reads a compressed answer as it arrives: its Content-Length is not what is read", async () => {
    const body = hugeBody(100 * 1024 * 1024);
    const f = mswFetch(
      http.post(
        `${URL_BASE}/exec`,
        () =>
          new HttpResponse(body, {
            headers: { "content-encoding": "gzip", "content-length": "100" },
          }),
      ),
    );
    expect(ProtocolError.isInstance(await failure(client(f).run("x")))).toBe(true);
    expect(body.sent()).toBeLessThan(8 * 1024 * 1024);
  });

  it("replays the tail as events when a streaming call gets such an answer", async () => {
    const answer = bigAnswer(2 * MiB, true);
    const f = mswFetch(http.post(`${URL_BASE}/exec`, answer.respond));
    const seen: string[] = [];
    const result = await client(f, { maxResponseBytes: MiB }).run("x", {
      onOutput: (event) => seen.push(`${event.stream}:${event.data.length}`),
    });
    expect(result.stdoutBytes).toBe(utf8ByteLength(answer.stdout));
    expect(seen).toEqual([`stdout:${result.stdout.length}`, "stderr:13"]);
    expect(utf8ByteLength(result.stdout)).toBeLessThanOrEqual(MiB);
  });

  it("a large answer of the wrong shape is a ProtocolError naming the fields", async () => {
    const text = JSON.stringify({ stdout: "x".repeat(2 * MiB), stderr: 5 });
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => new HttpResponse(text)));
    const error = (await failure(client(f, { maxResponseBytes: MiB }).run("x"))) as ProtocolError;
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.paths).toEqual([["stderr"], ["code"]]);
  });

  it("a large answer cut off midway is not JSON", async () => {
    const text = JSON.stringify({ stdout: "x".repeat(2 * MiB), stderr: "", code: 0 });
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new HttpResponse(text.slice(0, -20))),
      http.post(`${URL_BASE}/cancel`, () =>
        HttpResponse.json({ error: "not_found" }, { status: 404 }),
      ),
    );
    const error = await failure(client(f, { maxResponseBytes: MiB }).run("x"));
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/not protocol JSON/);
  });
});

describe("run: refused before sending", () => {
  it("an option calls do not have (graceSeconds is a client option) is refused, naming it", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    const c = client(f);
    const options = { graceSeconds: 5 } as unknown as RunOptions;
    for (const call of [
      () => c.run("x", options),
      () =>
        c.runMany([{ command: "x", ...options }]).then((s) => {
          if (s[0]?.status === "rejected") throw s[0].reason;
        }),
    ]) {
      const error = (await failure(call())) as InvalidRequestError;
      expect(InvalidRequestError.isInstance(error)).toBe(true);
      expect(error.message).toMatch(/has no option `graceSeconds` \(it would be ignored\)/);
      expect(error.issues).toEqual([{ path: ["graceSeconds"], message: "unknown option" }]);
    }
    expect(() => c.stream("x", options)).toThrow(/graceSeconds/);
    expect(execRequests(f)).toHaveLength(0);
  });

  it("a command the protocol refuses is refused in its words, with or without options", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    const c = client(f);
    for (const options of [{}, { timeoutSeconds: 5 }]) {
      const empty = (await failure(c.run("", options))) as InvalidRequestError;
      expect(InvalidRequestError.isInstance(empty)).toBe(true);
      expect(empty.message).toContain("command: command must not be empty");
      expect(empty.issues).toEqual([{ path: ["command"], message: "command must not be empty" }]);
      const notText = await failure(c.run(42 as unknown as string, options));
      expect(InvalidRequestError.isInstance(notText)).toBe(true);
      expect(notText.message).toMatch(/command/);
    }
    expect(execRequests(f)).toHaveLength(0);
  });

  it("a call without options sends the request the protocol's schema gives, byte for byte", async () => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    await client(f, { cwd: "/srv", timeoutSeconds: 7 }).run("echo hi");
    const sent = await (execRequests(f)[0] as Request).text();
    expect(sent).toBe(JSON.stringify(execRequestSchema.parse(JSON.parse(sent))));
    expect(JSON.parse(sent)).toEqual({
      sandboxId: expect.stringMatching(/^mikan-task-/),
      command: "echo hi",
      timeoutSeconds: 7,
      cwd: "/srv",
    });
  });

  it("a caller's upper-case sandbox id is lower-cased, as the reference bridge does", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)),
      http.post(`${URL_BASE}/cancel`, async ({ request }) => {
        const { sandboxId } = (await request.json()) as { sandboxId: string };
        return HttpResponse.json({ ok: true, sandboxId, cancelled: false });
      }),
    );
    const c = client(f);
    const result = await c.run("x", { sandboxId: "My-Task-1" });
    expect(result.sandboxId).toBe("my-task-1");
    expect((await (execRequests(f)[0] as Request).json()).sandboxId).toBe("my-task-1");
    expect((await c.cancel("My-Task-1")).sandboxId).toBe("my-task-1");
    expect((await (cancelRequests(f)[0] as Request).json()).sandboxId).toBe("my-task-1");
  });

  it.each([
    ["an empty command", "", {}, ["command"]],
    ["a relative cwd", "x", { cwd: "rel" }, ["cwd"]],
    ["an invalid env name", "x", { env: { "BAD-NAME": "v" } }, ["env", "BAD-NAME"]],
    ["a non-positive timeout", "x", { timeoutSeconds: 0 }, ["timeoutSeconds"]],
    ["an invalid sandbox id", "x", { sandboxId: "not_valid!" }, ["sandboxId"]],
    ["a fractional maxOutputBytes", "x", { maxOutputBytes: 1.5 }, ["maxOutputBytes"]],
  ])("%s is an InvalidRequestError and nothing is sent", async (_, command, options, path) => {
    const f = mswFetch(http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)));
    const error = (await failure(client(f).run(command, options))) as InvalidRequestError;
    expect(InvalidRequestError.isInstance(error)).toBe(true);
    expect(error.issues.map((i) => i.path)).toContainEqual(path);
    expect(error.status).toBeUndefined();
    expect(f.requests).toHaveLength(0);
  });

  it("an env value never appears in a validation error", async () => {
    const f = mswFetch();
    const error = await failure(
      client(f).run("x", { env: { GOOD: "visible-secret", "1BAD": "other-secret" } }),
    );
    expect(error.message).not.toMatch(/visible-secret|other-secret/);
  });
});

describe("retries: only what provably did not run", () => {
  it("retries 503 capacity_exceeded with the same sandbox id, honouring retryAfterSeconds", async () => {
    let calls = 0;
    const retries: RetryInfo[] = [];
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        ++calls === 1
          ? HttpResponse.json({ ...capacityBody, retryAfterSeconds: 0.05 }, { status: 503 })
          : HttpResponse.json(fullResult),
      ),
    );
    const result = await client(f, {
      retry: { initialDelayMs: 1, onRetry: (i: RetryInfo) => retries.push(i) },
    }).run("x");
    const ids = await Promise.all(execRequests(f).map(async (r) => (await r.json()).sandboxId));
    expect(ids).toHaveLength(2);
    expect(ids[0]).toBe(ids[1]);
    expect(result.sandboxId).toBe(ids[0]);
    expect(retries).toHaveLength(1);
    expect(retries[0]?.delayMs).toBeGreaterThanOrEqual(50);
    expect(CapacityError.isInstance(retries[0]?.error)).toBe(true);
  });

  it("with patient: false, retries 429 (any body) up to maxAttempts, then throws CapacityError", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.text("slow down", { status: 429 })),
    );
    const error = await failure(
      client(f, { retry: { maxAttempts: 3, initialDelayMs: 1, patient: false } }).run("x"),
    );
    expect(CapacityError.isInstance(error)).toBe(true);
    expect(error.status).toBe(429);
    expect(execRequests(f)).toHaveLength(3);
  });

  it("honours a Retry-After header in seconds", async () => {
    let calls = 0;
    const retries: RetryInfo[] = [];
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        ++calls === 1
          ? HttpResponse.json(capacityBody, { status: 503, headers: { "retry-after": "1" } })
          : HttpResponse.json(fullResult),
      ),
    );
    const started = Date.now();
    await client(f, {
      retry: { initialDelayMs: 1, onRetry: (i: RetryInfo) => retries.push(i) },
    }).run("x");
    expect(retries[0]?.delayMs).toBeGreaterThanOrEqual(1000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  });

  it("gives up at once when Retry-After exceeds the retry budget, reporting it", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () =>
        HttpResponse.json(capacityBody, { status: 503, headers: { "retry-after": "3600" } }),
      ),
    );
    const error = (await failure(client(f).run("x"))) as CapacityError;
    expect(CapacityError.isInstance(error)).toBe(true);
    expect(error.retryAfterSeconds).toBe(3600);
    expect(error.message).toMatch(/after 3600s/);
    expect(execRequests(f)).toHaveLength(1);
  });

  it("retry: false sends once", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(capacityBody, { status: 503 })),
    );
    const error = (await failure(client(f, { retry: false }).run("x"))) as CapacityError;
    expect(error.retryAfterSeconds).toBe(5);
    expect(execRequests(f)).toHaveLength(1);
  });

  it.each([500, 502, 504])("never re-sends after HTTP %i", async (status) => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(errorBody("internal"), { status })),
    );
    expect(BridgeError.isInstance(await failure(client(f).run("x")))).toBe(true);
    expect(execRequests(f)).toHaveLength(1);
  });

  it("retries a refused connection, then reports a ConnectionError", async () => {
    const f = mswFetch();
    const error = await failure(
      client(f, { retry: { maxAttempts: 4, initialDelayMs: 1 } }).run("x"),
    );
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/ECONNREFUSED.*nothing was sent/);
    expect(f.requests).toHaveLength(4);
  });

  it.each(["ENOTFOUND", "EAI_AGAIN"])("retries a DNS failure (%s)", async (code) => {
    let calls = 0;
    const fetchImpl = (async () => {
      calls++;
      throw new TypeError("fetch failed", { cause: Object.assign(new Error(code), { code }) });
    }) as typeof globalThis.fetch;
    const error = await failure(
      client(fetchImpl, { retry: { maxAttempts: 2, initialDelayMs: 1 } }).run("x"),
    );
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(calls).toBe(2);
  });

  it.each(["ECONNRESET", "UND_ERR_SOCKET", "EPIPE"])(
    "never re-sends after %s (the request may have arrived)",
    async (code) => {
      let calls = 0;
      const fetchImpl = (async (url: string) => {
        if (url.endsWith("/exec")) calls++;
        throw new TypeError("fetch failed", { cause: Object.assign(new Error(code), { code }) });
      }) as typeof globalThis.fetch;
      const error = await failure(client(fetchImpl).run("x"));
      expect(ConnectionError.isInstance(error)).toBe(true);
      expect(error.message).toContain(code);
      expect(calls).toBe(1);
    },
  );

  it("stops retrying when the caller aborts during the backoff", async () => {
    const controller = new AbortController();
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => {
        setTimeout(() => controller.abort(), 20);
        return HttpResponse.json(capacityBody, { status: 503 });
      }),
    );
    // A backoff of a minute, longer than this test may take: only the abort can end it.
    const error = await failure(
      client(f, { retry: { initialDelayMs: 60_000, maxDelayMs: 60_000 } }).run("x", {
        signal: controller.signal,
      }),
    );
    expect(AbortError.isInstance(error)).toBe(true);
    expect(execRequests(f)).toHaveLength(1);
    // Nothing ran, so there is nothing to cancel.
    await new Promise((r) => setTimeout(r, 50));
    expect(cancelRequests(f)).toHaveLength(0);
  });
});

describe("deadlines and aborts", () => {
  const cancelOk = http.post(`${URL_BASE}/cancel`, async ({ request }) => {
    const { sandboxId } = (await request.json()) as { sandboxId: string };
    return HttpResponse.json({ ok: true, sandboxId, cancelled: true });
  });

  it("a bridge that never answers is a TimeoutError, and the sandbox is cancelled", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new Promise<never>(() => {})),
      cancelOk,
    );
    const c = client(f, { timeoutSeconds: 0.2, graceSeconds: 0.1, retry: false });
    const error = await failure(c.run("x"));
    expect(TimeoutError.isInstance(error)).toBe(true);
    await eventually(() => cancelRequests(f).length === 1);
    const exec = await execRequests(f)[0]?.json();
    expect(await cancelRequests(f)[0]?.json()).toEqual({ sandboxId: exec.sandboxId });
    await c.close();
  });

  it("a body that stalls midway is a TimeoutError", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new HttpResponse(stallingBody('{"stdout":"par'))),
      cancelOk,
    );
    const error = await failure(
      client(f, { timeoutSeconds: 0.2, graceSeconds: 0.1, retry: false }).run("x"),
    );
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(/within 0.3s/);
  });

  it("the caller's abort ends the call at once with AbortError and cancels the sandbox", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new Promise<never>(() => {})),
      cancelOk,
    );
    const controller = new AbortController();
    const c = client(f);
    const pending = c.run("sleep 100", { signal: controller.signal });
    await eventually(() => execRequests(f).length === 1);
    // The request never answers: only the abort can end the call within this test's time.
    controller.abort();
    const error = await failure(pending);
    expect(AbortError.isInstance(error)).toBe(true);
    await eventually(() => cancelRequests(f).length === 1);
    const { sandboxId } = await (execRequests(f)[0] as Request).json();
    expect(await cancelRequests(f)[0]?.json()).toEqual({ sandboxId });
    expect(cancelRequests(f)[0]?.headers.get("authorization")).toBe(`Bearer ${TOKEN}`);
  });

  it("a failing best-effort cancel never reaches the caller", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, () => new Promise<never>(() => {})),
      http.post(`${URL_BASE}/cancel`, () => HttpResponse.error()),
    );
    const controller = new AbortController();
    const c = client(f);
    const pending = c.run("x", { signal: controller.signal });
    await eventually(() => execRequests(f).length === 1);
    controller.abort();
    expect(AbortError.isInstance(await failure(pending))).toBe(true);
    await eventually(() => cancelRequests(f).length === 1);
    await c.close();
  });

  describe("the default grace period follows the call's own timeout", () => {
    /** A bridge that never answers /exec (until the call aborts it) and accepts every cancel. */
    const silentBridge: typeof globalThis.fetch = (input, init) => {
      if (String(input).endsWith("/cancel")) {
        const { sandboxId } = JSON.parse(String(init?.body));
        return Promise.resolve(Response.json({ ok: true, sandboxId, cancelled: true }));
      }
      return new Promise((_, reject) => {
        init?.signal?.addEventListener("abort", () => reject(init.signal?.reason), { once: true });
      });
    };
    afterEach(() => {
      vi.useRealTimers();
    });

    /** Runs a call on fake timers; resolves with the seconds it took to time out. */
    async function secondsUntilTimeout(
      options: Record<string, unknown>,
      timeoutSeconds: number,
      notBefore: number,
    ): Promise<string> {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
      const c = client(silentBridge, { retry: false, ...options });
      let settled: unknown;
      const pending = c.run("x", { timeoutSeconds }).catch((error: unknown) => {
        settled = error;
      });
      await vi.advanceTimersByTimeAsync(notBefore * 1000 - 100);
      expect(settled).toBeUndefined();
      await vi.advanceTimersByTimeAsync(200);
      expect(TimeoutError.isInstance(settled)).toBe(true);
      await pending;
      await c.close();
      return /within ([\d.]+)s/.exec((settled as Error).message)?.[1] ?? "";
    }

    it("a short call on a client with the default 120 s timeout gets 10 s, not 30 s", async () => {
      expect(await secondsUntilTimeout({}, 2, 12)).toBe("12");
    });

    it("a long call on a client with a short default timeout gets 25 s, not 10 s", async () => {
      expect(await secondsUntilTimeout({ timeoutSeconds: 2 }, 25, 50)).toBe("50");
    });

    it("an explicit graceSeconds is kept for every call", async () => {
      expect(await secondsUntilTimeout({ graceSeconds: 3 }, 25, 28)).toBe("28");
    });
  });

  it("an already aborted signal sends nothing", async () => {
    const f = mswFetch(cancelOk);
    const error = await failure(client(f).run("x", { signal: AbortSignal.abort() }));
    expect(AbortError.isInstance(error)).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    expect(f.requests).toHaveLength(0);
  });
});

describe("health and cancel", () => {
  it("health validates full and reference answers", async () => {
    const full = await client(
      mswFetch(http.get(`${URL_BASE}/health`, () => HttpResponse.json(fullHealth))),
    ).health();
    expect(full).toEqual(fullHealth);
    const reference = await client(
      mswFetch(http.get(`${URL_BASE}/health`, () => HttpResponse.json(referenceHealth))),
    ).health();
    expect(reference).toEqual({ ok: true });
  });

  it("health refuses a non-protocol answer", async () => {
    const f = mswFetch(http.get(`${URL_BASE}/health`, () => HttpResponse.json({ ok: false })));
    const error = (await failure(client(f).health())) as ProtocolError;
    expect(ProtocolError.isInstance(error)).toBe(true);
    expect(error.paths).toEqual([["ok"]]);
  });

  it("health retries a refused connection and maps 401", async () => {
    const refused = mswFetch();
    expect(
      ConnectionError.isInstance(
        await failure(client(refused, { retry: { maxAttempts: 2, initialDelayMs: 1 } }).health()),
      ),
    ).toBe(true);
    expect(refused.requests).toHaveLength(2);
    const denied = mswFetch(
      http.get(`${URL_BASE}/health`, () =>
        HttpResponse.json(errorBody("unauthorized"), { status: 401 }),
      ),
    );
    expect(AuthenticationError.isInstance(await failure(client(denied).health()))).toBe(true);
  });

  it("health is bounded by the grace period (at least 1 s)", async () => {
    const f = mswFetch(http.get(`${URL_BASE}/health`, () => new Promise<never>(() => {})));
    const started = Date.now();
    const error = await failure(client(f, { graceSeconds: 0 }).health());
    expect(TimeoutError.isInstance(error)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("cancel returns whether a command was stopped", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/cancel`, async ({ request }) => {
        const { sandboxId } = (await request.json()) as { sandboxId: string };
        return HttpResponse.json({ ok: true, sandboxId, cancelled: sandboxId === "running-1" });
      }),
    );
    const c = client(f);
    expect(await c.cancel("running-1")).toEqual({
      sandboxId: "running-1",
      cancelled: true,
      supported: true,
    });
    expect(await c.cancel("idle-1")).toEqual({
      sandboxId: "idle-1",
      cancelled: false,
      supported: true,
    });
  });

  it("cancel refuses an invalid id before sending", async () => {
    const f = mswFetch();
    const c = client(f);
    expect(InvalidRequestError.isInstance(await failure(c.cancel("Bad Id")))).toBe(true);
    expect(f.requests).toHaveLength(0);
  });

  it.each([
    [404, errorBody("not_found")],
    [404, { error: "not_found" }],
    [405, errorBody("method_not_allowed")],
  ])(
    "cancel on a bridge without /cancel (HTTP %s) resolves with supported: false",
    async (status, body) => {
      const f = mswFetch(
        http.post(`${URL_BASE}/cancel`, () => HttpResponse.json(body, { status })),
      );
      expect(await client(f).cancel("some-id")).toEqual({
        sandboxId: "some-id",
        cancelled: false,
        supported: false,
      });
      expect(cancelRequests(f)).toHaveLength(1);
    },
  );

  it("cancel still throws what is not a missing route (a 400, a 401, a 500)", async () => {
    for (const [status, code] of [
      [400, "invalid_request"],
      [401, "unauthorized"],
      [500, "internal"],
    ] as const) {
      const f = mswFetch(
        http.post(`${URL_BASE}/cancel`, () => HttpResponse.json(errorBody(code), { status })),
      );
      const error = await failure(client(f, { retry: false }).cancel("some-id"));
      expect(error.status).toBe(status);
      expect(expectedErrorClass[code].isInstance(error)).toBe(true);
    }
  });

  it("a closed client refuses new calls", async () => {
    const c = client(mswFetch());
    await c.close();
    await c.close();
    await expect(c.run("x")).rejects.toThrow(/closed/);
    await expect(c.health()).rejects.toThrow(/closed/);
  });
});
