import { createClient, RemoteTaskError } from "@remote-task/client";
import {
  ERROR_STATUS,
  type ExecResult,
  errorBodySchema,
  healthResponseSchema,
} from "@remote-task/protocol";
import fc from "fast-check";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestBridge, type TestBridge } from "./support/bridge.js";
import { fuzzParameters, hostileText } from "./support/fuzz.js";
import { expectProtocolAnswer, firstResponse, parseEvents, rawExchange } from "./support/http.js";
import { skipBwrap } from "./support/isolation.js";

const LIMITS = {
  maxRequestBytes: 16_384,
  maxTimeoutSeconds: 10,
  maxEnvEntries: 16,
  maxEnvEntryBytes: 1_024,
};

const mostly = <T, U>(valid: fc.Arbitrary<T>, hostile: fc.Arbitrary<U>) =>
  fc.oneof({ weight: 9, arbitrary: valid }, { weight: 1, arbitrary: hostile });
const validId = fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,40}[a-z0-9])?$/);
const envName = fc
  .stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,10}$/)
  .filter((name) => name !== "FUZZ_VALUE");

/**
 * Commands are harmless and fixed (this is the host's real shell); the hostility is in every
 * other field. `printf` echoes FUZZ_VALUE, so env values make the whole trip and back.
 */
const ECHO_VALUE = `printf '%s' "$FUZZ_VALUE"`;
const execRequest = fc.record(
  {
    sandboxId: mostly(validId, fc.oneof(hostileText, fc.integer(), fc.constant(null))),
    command: mostly(
      fc.oneof(
        fc.constant(ECHO_VALUE),
        fc.constantFrom("true", "pwd", "exit 3", "echo out; echo err >&2"),
      ),
      fc.constantFrom("", 7, null),
    ),
    timeoutSeconds: mostly(
      fc.double({ min: 1, max: 5, noNaN: true }),
      fc.oneof(fc.double(), fc.constantFrom(0, -1, 5e-324, 1e308, "1")),
    ),
    cwd: mostly(
      fc.constantFrom("/workspace", "/workspace/a/b", "/workspace/./x/../y", "/workspace/"),
      fc.oneof(
        fc.constantFrom(
          "/workspace/../etc",
          "/workspace/../../",
          "/",
          "/etc",
          "/tmp",
          "/proc/self",
          "//workspace",
          "/nonexistent/dir",
          "relative",
          "",
        ),
        hostileText.map((t) => `/workspace/${t}`),
        hostileText,
      ),
    ),
    env: mostly(
      fc.dictionary(envName, hostileText, { maxKeys: 4 }),
      fc.oneof(
        fc.dictionary(hostileText, hostileText, { maxKeys: 3 }),
        fc.constantFrom("PATH=/x", [1], null),
      ),
    ),
    value: hostileText,
    maxOutputBytes: mostly(
      fc.integer({ min: 1, max: 2_000_000 }),
      fc.oneof(fc.double(), fc.constantFrom(0, -5, "10")),
    ),
    stream: fc.boolean(),
    extra: mostly(fc.constant(undefined), fc.jsonValue({ maxDepth: 2 })),
  },
  { requiredKeys: ["sandboxId", "command", "stream", "value"] },
);

async function post(url: string, token: string, body: string, stream: boolean) {
  const response = await request(`${url}/exec`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      accept: stream ? "text/event-stream" : "application/json",
    },
    body,
  });
  return {
    status: response.statusCode,
    contentType: String(response.headers["content-type"] ?? ""),
    text: await response.body.text(),
  };
}

/** What `printf '%s' value` prints, as the bridge decodes it (lone surrogates become U+FFFD). */
function printed(value: string): string {
  return Buffer.from(value, "utf8").toString("utf8");
}

let echoed = 0;

function hostileExecProperty(host: () => TestBridge) {
  return fc.asyncProperty(execRequest, async (r) => {
    const { bridge } = host();
    const payload: Record<string, unknown> = { sandboxId: r.sandboxId, command: r.command };
    for (const key of ["timeoutSeconds", "cwd", "maxOutputBytes"] as const) {
      if (r[key] !== undefined) payload[key] = r[key];
    }
    const env: unknown = r.env ?? {};
    payload.env =
      typeof env === "object" && env !== null && !Array.isArray(env)
        ? { ...env, FUZZ_VALUE: r.value }
        : env;
    if (r.extra !== undefined) payload.unexpected = r.extra;
    const answer = await post(bridge.url, bridge.token, JSON.stringify(payload), r.stream);
    const parsed = expectProtocolAnswer("/exec", "POST", answer);
    // The backend is healthy, so any refusal is about the request: a 4xx, never a 5xx.
    expect(answer.status, answer.text).toBeLessThan(500);
    if (answer.status !== 200) return;
    let result: ExecResult | undefined;
    if (r.stream) {
      const events = parseEvents(answer.text);
      const last = events[events.length - 1];
      if (last?.type === "exit") result = last.result;
    } else result = parsed as ExecResult;
    if (result !== undefined && r.command === ECHO_VALUE && result.outcome === "exited") {
      // The env value made the whole trip: request, sandbox environment, output capture, answer.
      expect(result.stdout).toBe(printed(r.value));
      expect(result.stdoutBytes).toBe(Buffer.byteLength(r.value, "utf8"));
      echoed++;
    }
  });
}

async function expectClean(host: TestBridge): Promise<void> {
  await host.settled();
  expect(host.backend.stats().started).toBe(host.backend.stats().destroyed);
  expect(await host.leftoverDirs()).toEqual([]);
  expect(host.logs.entries.filter((entry) => entry.event === "internal_error")).toEqual([]);
  const health = await request(`${host.bridge.url}/health`, {
    headers: { authorization: `Bearer ${host.bridge.token}` },
  });
  expect(health.statusCode).toBe(200);
  healthResponseSchema.parse(await health.body.json());
}

describe("fuzz: hostile exec requests against the real local backend", () => {
  let none: TestBridge;
  let bwrap: TestBridge | undefined;
  beforeAll(async () => {
    none = await startTestBridge({ isolation: "none", limits: LIMITS });
    if (!skipBwrap) bwrap = await startTestBridge({ isolation: "bwrap", limits: LIMITS });
  });
  afterAll(async () => {
    await none?.close();
    await bwrap?.close();
  });

  it("isolation none: never a 500, always a protocol body, env values round-trip, nothing left behind", async () => {
    echoed = 0;
    await fc.assert(
      hostileExecProperty(() => none),
      fuzzParameters(300),
    );
    await expectClean(none);
    // Enough of the inputs were valid enough to run, or the property proves little.
    console.info(
      `[fuzz] ${none.backend.stats().started} sandboxes started, ${echoed} env values echoed`,
    );
    expect(none.backend.stats().started).toBeGreaterThan(60);
    expect(echoed).toBeGreaterThan(20);
  }, 120_000);

  it.skipIf(skipBwrap)(
    "isolation bwrap: the same properties",
    async () => {
      const host = bwrap as TestBridge;
      await fc.assert(
        hostileExecProperty(() => host),
        fuzzParameters(150),
      );
      await expectClean(host);
    },
    120_000,
  );
});

describe("fuzz: raw bytes at the HTTP host", () => {
  let host: TestBridge;
  beforeAll(async () => {
    host = await startTestBridge({ isolation: "none", limits: LIMITS });
  });
  afterAll(async () => {
    await host?.close();
  });

  const token = () => host.bridge.token;
  const line = fc.oneof(
    fc.constantFrom(
      "GET /health HTTP/1.1",
      "POST /exec HTTP/1.1",
      "POST /cancel HTTP/1.0",
      "GET / HTTP/2.0",
      "PRI * HTTP/2.0",
      "GET /health HTTP/9.9",
      "G\u0000T / HTTP/1.1",
      "GET /%zz HTTP/1.1",
      "GET http://evil.example/health HTTP/1.1",
      "FROB /exec HTTP/1.1",
    ),
    hostileText,
  );
  const header = fc.oneof(
    fc.constantFrom(
      "Host: 127.0.0.1",
      "Content-Length: 5",
      "Content-Length: -1",
      "Content-Length: 99999999999999999999",
      "Content-Length: 3\r\nContent-Length: 4",
      "Transfer-Encoding: chunked",
      "Transfer-Encoding: chunked\r\nContent-Length: 3",
      "Content-Type: application/json",
      "Content-Type: text/plain",
      "Content-Type: application/json; charset=utf-16",
      "Content-Type: multipart/form-data; boundary=x",
      "Content-Length: 20000",
      "Accept: text/event-stream",
      "Expect: 100-continue",
      `X-Big: ${"b".repeat(20_000)}`,
      "Bad Header",
      ": empty-name",
    ),
    fc.constant("AUTH"),
    hostileText.map((t) => `X-Fuzz: ${t}`),
  );
  const body = fc.oneof(
    fc.constantFrom(
      "",
      "{}",
      "hello",
      "5\r\nhello\r\n0\r\n\r\n",
      "zz\r\nnot-hex\r\n",
      '{"sandboxId":"fuzz-raw","command":"true"}',
      // Over the 16 KiB request limit, framed and unframed.
      "x".repeat(20_000),
      JSON.stringify({ sandboxId: "fuzz-raw-big", command: `echo ${"y".repeat(20_000)}` }),
    ),
    hostileText,
  );

  it("answers garbage, malformed and smuggling-shaped requests with a protocol 4xx (or closes), never a 500 or a crash", async () => {
    let answered = 0;
    await fc.assert(
      fc.asyncProperty(
        line,
        fc.array(header, { maxLength: 4 }),
        fc.constantFrom("\r\n", "\n"),
        body,
        async (first, headers, eol, payload) => {
          const head = [
            first,
            ...headers.map((h) => (h === "AUTH" ? `Authorization: Bearer ${token()}` : h)),
          ].join(eol);
          const raw = await rawExchange(
            host.bridge.url.split(":").map(Number)[2] ?? 0,
            Buffer.from(`${head}${eol}${eol}${payload}`, "utf8"),
          );
          if (raw.length === 0) return; // closing without an answer is allowed
          answered++;
          const response = firstResponse(raw);
          expect(response.status).not.toBe(500);
          if (
            response.status >= 400 &&
            response.body !== undefined &&
            response.headers["content-type"]?.startsWith("application/json")
          ) {
            const error = errorBodySchema.parse(JSON.parse(response.body));
            expect(response.status).toBe(ERROR_STATUS[error.code]);
          }
        },
      ),
      fuzzParameters(300),
    );
    expect(answered).toBeGreaterThan(100);
    await expectClean(host);
  }, 120_000);

  it("the real client, given arbitrary options, either returns a result or throws a typed error, never a 500", async () => {
    const client = createClient({
      url: host.bridge.url,
      token: host.bridge.token,
      graceSeconds: 5,
      retry: false,
    });
    const startedBefore = host.backend.stats().started;
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.record(
            {
              timeoutSeconds: mostly(
                fc.double({ min: 1, max: 5, noNaN: true }),
                fc.oneof(fc.double(), fc.constantFrom(0, -1, 1e308)),
              ),
              cwd: mostly(
                fc.constantFrom("/workspace/sub", "/workspace/../etc", "/etc"),
                fc.oneof(fc.constant("relative"), hostileText),
              ),
              env: mostly(
                fc.dictionary(envName, hostileText, { maxKeys: 4 }),
                fc.dictionary(hostileText, hostileText, { maxKeys: 2 }),
              ),
              maxOutputBytes: mostly(fc.integer({ min: 1, max: 2_000_000 }), fc.double()),
              sandboxId: fc.option(mostly(validId, hostileText), { nil: undefined }),
            },
            { requiredKeys: [] },
          ),
          fc.boolean(),
          async (options, streamed) => {
            try {
              const result = await client.run("echo out; exit 2", {
                ...options,
                ...(streamed ? { onOutput: () => {} } : {}),
              });
              expect(result.exitCode === 2 || result.outcome !== "exited").toBe(true);
            } catch (error) {
              expect(RemoteTaskError.isInstance(error), String(error)).toBe(true);
              expect((error as RemoteTaskError).status).not.toBe(500);
            }
          },
        ),
        fuzzParameters(200),
      );
    } finally {
      await client.close();
    }
    await expectClean(host);
    expect(host.backend.stats().started - startedBefore).toBeGreaterThan(30);
  }, 120_000);
});
