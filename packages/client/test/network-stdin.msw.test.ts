import { errorBodySchema, execRequestSchema, type StreamEvent } from "@remote-task/protocol";
import { fullHealthResponse } from "@remote-task/protocol/fixtures";
import { HttpResponse, http } from "msw";
import { describe, expect, it } from "vitest";
import {
  AuthenticationError,
  createClient,
  ForbiddenError,
  InvalidRequestError,
  type RunOptions,
} from "../src/index.js";
import { stdinField } from "../src/stdin.js";
import { failure } from "./helpers/assertions.js";
import { errorBody, fullResult, sse } from "./helpers/fixtures.js";
import { mswFetch } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test";

/** What a protocol 2 bridge that takes both reports on `/health`. */
const protocol2Health = fullHealthResponse;

/** `/health` answering `health` (default: a protocol 2 bridge that takes network and stdin). */
function healthHandler(health: object = protocol2Health) {
  return http.get(`${URL_BASE}/health`, () => HttpResponse.json(health));
}

/** A bridge that answers every exec with `answer` (default: the full result). */
function bridge(answer: () => Response = () => HttpResponse.json(fullResult)) {
  return mswFetch(healthHandler(), http.post(`${URL_BASE}/exec`, answer));
}

/** The exec requests among those sent (the `/health` check before the first call is not one). */
function execRequests(f: { requests: Request[] }): Request[] {
  return f.requests.filter((r) => new URL(r.url).pathname === "/exec");
}

function client(f: typeof globalThis.fetch) {
  return createClient({ url: URL_BASE, token: "tok-Secret-123", fetch: f, retry: false });
}

/** An exec handler answering a stream: `start`, then `last`. */
function streamedExec(last: StreamEvent) {
  return http.post(`${URL_BASE}/exec`, async ({ request }) => {
    const { sandboxId } = (await request.json()) as { sandboxId: string };
    const body = sse({ type: "start", sandboxId, protocol: 2 }) + sse(last);
    return new HttpResponse(body, { headers: { "content-type": "text/event-stream" } });
  });
}

/** The exec request bodies the bridge received, checked against the protocol schema. */
async function sentBodies(f: { requests: Request[] }) {
  return Promise.all(execRequests(f).map(async (r) => execRequestSchema.parse(await r.json())));
}

/** Every byte value, then a NUL-heavy tail: what text transports tend to break. */
const allBytes = Uint8Array.from({ length: 300 }, (_, i) => (i < 256 ? i : 0));

describe("network and stdin are sent as the protocol says", () => {
  it("run sends network and text stdin as given", async () => {
    const f = bridge();
    await client(f).run("wc -l", {
      network: { allow: ["pypi.org", "*.pythonhosted.org:443"] },
      stdin: "a,b\n1,2\n",
    });
    const [body] = await sentBodies(f);
    expect(body?.network).toEqual({ allow: ["pypi.org", "*.pythonhosted.org:443"] });
    expect(body?.stdin).toBe("a,b\n1,2\n");
  });

  it("sends bytes as base64 that decodes to exactly those bytes", async () => {
    const f = bridge();
    const c = client(f);
    await c.run("wc -c", { stdin: allBytes });
    await c.run("wc -c", { stdin: allBytes.buffer });
    // A view into a larger buffer: only its own bytes are sent.
    await c.run("wc -c", { stdin: allBytes.subarray(250, 260) });
    const random = crypto.getRandomValues(new Uint8Array(65_536));
    const large = new Uint8Array(1024 * 1024 + 3);
    for (let at = 0; at < large.length; at += random.length)
      large.set(random.subarray(0, large.length - at), at);
    await c.run("wc -c", { stdin: large });
    const sent = (await sentBodies(f)).map((body) => body.stdin);
    const decoded = sent.map((stdin) => {
      if (typeof stdin !== "object") throw new Error("expected {base64}");
      return new Uint8Array(Buffer.from(stdin.base64, "base64"));
    });
    expect(decoded[0]).toEqual(allBytes);
    expect(decoded[1]).toEqual(allBytes);
    expect(decoded[2]).toEqual(allBytes.subarray(250, 260));
    expect(decoded[3]).toEqual(large);
    expect(sent[3]).toEqual({ base64: Buffer.from(large).toString("base64") });
  });

  it("encodes bytes without Node's Buffer (browsers, Workers)", () => {
    const saved = globalThis.Buffer;
    Reflect.deleteProperty(globalThis, "Buffer");
    try {
      expect(stdinField(Uint8Array.of(0, 255, 10))).toEqual({
        ok: true,
        value: { base64: "AP8K" },
        bytes: 3,
      });
      expect(stdinField("é")).toEqual({ ok: true, value: "é", bytes: 2 });
    } finally {
      globalThis.Buffer = saved;
    }
  });

  it("stream() and runMany's tasks send them too", async () => {
    const streamed = mswFetch(healthHandler(), streamedExec({ type: "exit", result: fullResult }));
    for await (const _ of client(streamed).stream("cat", { network: "open", stdin: "in" })) {
      // drain
    }
    expect(await sentBodies(streamed)).toMatchObject([{ network: "open", stdin: "in" }]);

    const many = bridge();
    const settled = await client(many).runMany([
      { command: "cat", network: "none", stdin: Uint8Array.of(1, 2) },
      { command: "true" },
    ]);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "fulfilled"]);
    const bodies = await sentBodies(many);
    const first = bodies.find((b) => b.command === "cat");
    const second = bodies.find((b) => b.command === "true");
    expect(first).toMatchObject({ network: "none", stdin: { base64: "AQI=" } });
    expect(second).not.toHaveProperty("network");
    expect(second).not.toHaveProperty("stdin");
  });

  it("a call without them sends neither field, so a protocol 1 bridge accepts it", async () => {
    const f = bridge();
    await client(f).run("true");
    const [raw] = await Promise.all(f.requests.map((r) => r.json()));
    expect(f.requests).toHaveLength(1); // no /health check for a call without them
    expect(Object.keys(raw as object).sort()).toEqual([
      "command",
      "cwd",
      "sandboxId",
      "timeoutSeconds",
    ]);
  });
});

describe("bad network or stdin is refused before sending", () => {
  it.each<[string, RunOptions, (string | number)[], RegExp]>([
    [
      "an unknown policy",
      { network: "internet" as never },
      ["network"],
      /"none", "open" or \{allow/,
    ],
    [
      "a URL as a host",
      { network: { allow: ["https://pypi.org"] } },
      ["network", "allow", 0],
      /host pattern/,
    ],
    [
      "an upper-case host",
      { network: { allow: ["PyPI.org"] } },
      ["network", "allow", 0],
      /lower case/,
    ],
    ["an empty allowlist", { network: { allow: [] } }, ["network", "allow"], />=1/],
    [
      "a misspelt key",
      { network: { allowed: ["a.com"] } as never },
      ["network"],
      /"none", "open" or \{allow/,
    ],
    [
      "a number as stdin",
      { stdin: 42 as never },
      ["stdin"],
      /string, a Uint8Array or an ArrayBuffer/,
    ],
    ["a lone surrogate", { stdin: "a\ud800b" }, ["stdin"], /lone UTF-16 surrogate/],
  ])("%s", async (_name, options, path, message) => {
    const f = bridge();
    const error = await failure(client(f).run("cat", options));
    expect(InvalidRequestError.isInstance(error)).toBe(true);
    const issues = (error as InvalidRequestError).issues;
    expect(issues.map((issue) => issue.path)).toContainEqual(path);
    expect(error.message).toMatch(message);
    expect(error.message).toMatch(/was not sent/);
    expect(f.requests).toHaveLength(0);
  });
});

describe("the bridge refusing network or stdin", () => {
  it("403 forbidden is a ForbiddenError with the bridge's words, never retried", async () => {
    const words =
      'network {"allow":["evil.example"]} is more than this bridge allows (ceiling: none)';
    const f = bridge(() =>
      HttpResponse.json(errorBodySchema.parse({ error: words, code: "forbidden" }), {
        status: 403,
      }),
    );
    const c = createClient({ url: URL_BASE, fetch: f, retry: { initialDelayMs: 1 } });
    const error = await failure(
      c.run("curl evil.example", { network: { allow: ["evil.example"] } }),
    );
    expect(ForbiddenError.isInstance(error)).toBe(true);
    expect(AuthenticationError.isInstance(error)).toBe(false);
    expect(error).toMatchObject({
      status: 403,
      code: "forbidden",
      retryable: false,
      mayHaveRun: false,
      bridgeMessage: words,
    });
    expect(error.message).toContain(words);
    expect(error.message).toContain("network.ceiling");
    expect(execRequests(f)).toHaveLength(1);
  });

  it("a forbidden stream error event is a ForbiddenError that did not run", async () => {
    const f = mswFetch(
      healthHandler(),
      streamedExec({ type: "error", error: errorBody("forbidden") }),
      http.post(`${URL_BASE}/cancel`, () =>
        HttpResponse.json({ ok: true, sandboxId: "x", cancelled: false }),
      ),
    );
    const error = await failure(client(f).run("x", { network: "open", onOutput: () => {} }));
    expect(ForbiddenError.isInstance(error)).toBe(true);
    expect(error.mayHaveRun).toBe(false);
  });

  it("a plain 403 without the forbidden code stays an AuthenticationError", async () => {
    const f = bridge(() => HttpResponse.json({ error: "Access denied" }, { status: 403 }));
    const error = await failure(client(f).run("x", { network: "open" }));
    expect(AuthenticationError.isInstance(error)).toBe(true);
  });

  it("413 for a call with stdin says stdin is too large", async () => {
    const words = "stdin is 2097152 bytes; this bridge takes at most 1048576";
    const f = bridge(() =>
      HttpResponse.json(errorBody("payload_too_large", { error: words }), { status: 413 }),
    );
    const error = await failure(client(f).run("wc -c", { stdin: new Uint8Array(2 * 1024 * 1024) }));
    expect(InvalidRequestError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ status: 413, code: "payload_too_large", bridgeMessage: words });
    expect(error.message).toMatch(
      /Its stdin \(2097152 bytes, 2\.0MB\) is too large for this bridge/,
    );
    expect(error.message).toContain("limits.maxStdinBytes");
    expect(error.message).toContain(words);
  });

  it("1 MiB + 1 byte against a 1 MiB limit: the size is exact, not 1.0MB beside 1.0MB", async () => {
    const f = bridge(() =>
      HttpResponse.json(errorBody("payload_too_large", { error: "Request body too large" }), {
        status: 413,
      }),
    );
    const error = await failure(client(f).run("wc -c", { stdin: new Uint8Array(1024 * 1024 + 1) }));
    expect(error.message).toContain("Its stdin (1048577 bytes, 1.0MB) is too large");
  });

  it("413 for the whole body of a call with stdin still names stdin", async () => {
    const f = bridge(() =>
      HttpResponse.json(errorBody("payload_too_large", { error: "Request body too large" }), {
        status: 413,
      }),
    );
    const error = await failure(client(f).run("wc -c", { stdin: "x".repeat(5000) }));
    expect(error.message).toMatch(/Its stdin \(5000 bytes, 4\.9KB\) is too large/);
  });

  it("413 for a call without stdin does not blame stdin", async () => {
    const f = bridge(() =>
      HttpResponse.json(errorBody("payload_too_large", { error: "Request body too large" }), {
        status: 413,
      }),
    );
    const error = await failure(client(f).run("x".repeat(100)));
    expect(InvalidRequestError.isInstance(error)).toBe(true);
    expect(error.message).not.toMatch(/stdin/);
  });

  it("a protocol 1 bridge's unknown-field 400 says the bridge is too old for the option", async () => {
    // What a protocol 1 bridge answers: its strict schema has neither field. Its /health claims
    // protocol 2, as behind a load balancer in the middle of an upgrade.
    const protocol1 = execRequestSchema.omit({ network: true, stdin: true });
    const f = mswFetch(
      healthHandler(),
      http.post(`${URL_BASE}/exec`, async ({ request }) => {
        const parsed = protocol1.safeParse(await request.json());
        if (parsed.success) return HttpResponse.json(fullResult);
        const issues = parsed.error.issues.map((i) => ({
          path: i.path as (string | number)[],
          message: i.message,
        }));
        return HttpResponse.json(
          errorBodySchema.parse({ error: "Invalid exec request", code: "invalid_request", issues }),
          { status: 400 },
        );
      }),
    );
    const c = client(f);
    const one = (await failure(c.run("cat", { network: "none" }))) as InvalidRequestError;
    expect(InvalidRequestError.isInstance(one)).toBe(true);
    expect(one.message).toMatch(/The bridge is too old for `network` \(HTTP 400 invalid_request\)/);
    expect(one.message).toMatch(/protocol 1/);
    expect(one.issues).toEqual([
      { path: ["network"], message: "not supported by this bridge (protocol 1)" },
    ]);
    const both = (await failure(
      c.run("cat", { network: "open", stdin: "x" }),
    )) as InvalidRequestError;
    expect(both.message).toMatch(/too old for `network` and `stdin`/);
    expect(both.issues.map((issue) => issue.path)).toEqual([["network"], ["stdin"]]);
    // Without the new fields the same bridge runs the call.
    expect((await c.run("cat")).exitCode).toBe(fullResult.code);
  });

  it("another unknown field is not blamed on the bridge's age", async () => {
    const f = bridge(() =>
      HttpResponse.json(
        errorBodySchema.parse({
          error: "Invalid exec request",
          code: "invalid_request",
          issues: [{ path: [], message: 'Unrecognized key: "priority"' }],
        }),
        { status: 400 },
      ),
    );
    const error = await failure(client(f).run("cat", { network: "none" }));
    expect(error.message).not.toMatch(/too old/);
    expect(error.message).toMatch(/Unrecognized key: "priority"/);
  });
});

describe("a bridge that would ignore network or stdin is found out before the call is sent", () => {
  const referenceHealth = { ok: true };

  it("the reference bridge's /health: a call with network is a ForbiddenError, one with stdin an InvalidRequestError, nothing sent", async () => {
    const f = mswFetch(
      healthHandler(referenceHealth),
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)),
    );
    const c = client(f);
    const network = await failure(c.run("curl -sI https://example.com", { network: "none" }));
    expect(ForbiddenError.isInstance(network)).toBe(true);
    expect(network.mayHaveRun).toBe(false);
    expect(network.message).toMatch(/does not control network access .*protocol 1.*was not sent/);
    const stdin = await failure(c.run("wc -l", { stdin: "a\nb\n" }));
    expect(InvalidRequestError.isInstance(stdin)).toBe(true);
    expect(stdin.message).toMatch(/does not take stdin .*was not sent/);
    const streamed = c.stream("cat", { network: "open" });
    expect(ForbiddenError.isInstance(await failure(streamed[Symbol.asyncIterator]().next()))).toBe(
      true,
    );
    const secrets = await failure(c.run("env", { secrets: ["GH_TOKEN"] }));
    expect(ForbiddenError.isInstance(secrets)).toBe(true);
    expect(secrets.mayHaveRun).toBe(false);
    expect(secrets.message).toMatch(/does not know secrets .*protocol 1.*was not sent/);
    expect(execRequests(f)).toHaveLength(0);
    // Without them the same bridge runs the call.
    expect((await c.run("true")).exitCode).toBe(fullResult.code);
    expect(execRequests(f)).toHaveLength(1);
  });

  it("a bridge that controls no network but takes stdin: stdin goes, network does not", async () => {
    const { network: _, ...noNetwork } = protocol2Health;
    const f = mswFetch(
      healthHandler(noNetwork),
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)),
    );
    const c = client(f);
    expect((await c.run("cat", { stdin: "x" })).exitCode).toBe(fullResult.code);
    expect(ForbiddenError.isInstance(await failure(c.run("cat", { network: "none" })))).toBe(true);
    expect(execRequests(f)).toHaveLength(1);
  });

  it("asks /health once for many calls, and again after a failed check", async () => {
    let healthAnswers = 0;
    let healthy = false;
    const f = mswFetch(
      http.get(`${URL_BASE}/health`, () => {
        healthAnswers++;
        return healthy
          ? HttpResponse.json(protocol2Health)
          : HttpResponse.json(errorBody("internal"), { status: 500 });
      }),
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)),
    );
    const c = client(f);
    await failure(c.run("cat", { stdin: "x" }));
    healthy = true;
    const results = await Promise.all(
      Array.from({ length: 8 }, () => c.run("cat", { stdin: "x", network: "none" })),
    );
    expect(results.every((r) => r.exitCode === 0)).toBe(true);
    expect(healthAnswers).toBe(2);
    expect(execRequests(f)).toHaveLength(8);
  });
});
