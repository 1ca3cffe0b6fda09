import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { posix } from "node:path";
import { createBridge } from "@remote-task/bridge";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { AuthenticationError, createClient, RemoteTaskError } from "@remote-task/client";
import { ERROR_STATUS, errorBodySchema, execResultSchema } from "@remote-task/protocol";
import fc from "fast-check";
import { request } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { secretMatcher, sha256 } from "../../packages/bridge/src/auth.js";
import { startTestBridge, type TestBridge, waitFor } from "./support/bridge.js";
import { startBridgeProcess } from "./support/bridge-process.js";
import { fuzzParameters } from "./support/fuzz.js";
import { rawExchange } from "./support/http.js";
import { skipBwrap } from "./support/isolation.js";
import { commandLine, processList } from "./support/processes.js";

const secret = (label: string) => `${label}-${randomBytes(12).toString("hex")}`;
const TOKEN = secret("tok");

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

async function call(
  host: { bridge: { url: string; token: string } },
  path: string,
  init: {
    method?: string;
    authorization?: string | null;
    body?: unknown;
    raw?: string;
    accept?: string;
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  const authorization =
    init.authorization === undefined ? `Bearer ${host.bridge.token}` : init.authorization;
  if (authorization !== null) headers.authorization = authorization;
  if (init.accept !== undefined) headers.accept = init.accept;
  const method =
    init.method ?? (init.body === undefined && init.raw === undefined ? "GET" : "POST");
  const response = await request(`${host.bridge.url}${path}`, {
    method,
    headers,
    ...(method === "GET" ? {} : { body: init.raw ?? JSON.stringify(init.body) }),
  });
  return {
    status: response.statusCode,
    headers: response.headers,
    text: await response.body.text(),
  };
}

function expectError(answer: Answer, code: keyof typeof ERROR_STATUS) {
  expect(answer.status, answer.text).toBe(ERROR_STATUS[code]);
  const body = errorBodySchema.parse(JSON.parse(answer.text));
  expect(body.code).toBe(code);
  return body;
}

describe("tokens", () => {
  let host: TestBridge;
  beforeAll(async () => {
    host = await startTestBridge({ token: TOKEN });
  });
  afterAll(async () => {
    await host.close();
  });

  const flip = (text: string, at: number) =>
    text.slice(0, at) + (text[at] === "a" ? "b" : "a") + text.slice(at + 1);

  const refused: [string, string | null][] = [
    ["missing", null],
    ["empty", ""],
    ["scheme only", "Bearer"],
    ["scheme and blanks", "Bearer   "],
    ["other scheme", `Basic ${Buffer.from(`u:${TOKEN}`).toString("base64")}`],
    ["token without scheme", TOKEN],
    ["two tokens", `Bearer ${TOKEN} ${TOKEN}`],
    ["first byte differs", `Bearer ${flip(TOKEN, 0)}`],
    ["last byte differs", `Bearer ${flip(TOKEN, TOKEN.length - 1)}`],
    ["prefix", `Bearer ${TOKEN.slice(0, -1)}`],
    ["extended", `Bearer ${TOKEN}x`],
    ["8 KB token", `Bearer ${"k".repeat(8_192)}`],
    ["non-ASCII", `Bearer ${TOKEN}\u00e9`],
  ];

  for (const [name, authorization] of refused) {
    it(`refuses a ${name} Authorization header with a 401 protocol body on every guarded route`, async () => {
      for (const [path, body] of [
        ["/health", undefined],
        ["/exec", { sandboxId: "sec-1", command: "true" }],
        ["/cancel", { sandboxId: "sec-1" }],
      ] as const) {
        const answer = await call(host, path, {
          authorization:
            authorization === null ? null : Buffer.from(authorization, "utf8").toString("latin1"),
          body,
        });
        const error = expectError(answer, "unauthorized");
        expect(answer.headers["www-authenticate"]).toMatch(/^Bearer /);
        expect(answer.text).not.toContain(TOKEN);
        expect(error.error).not.toContain("k".repeat(64));
      }
    });
  }

  it("the right token passes (scheme name case-insensitive), and /openapi.json is public", async () => {
    expect((await call(host, "/health")).status).toBe(200);
    expect((await call(host, "/health", { authorization: `bearer ${TOKEN}` })).status).toBe(200);
    expect((await call(host, "/openapi.json", { authorization: null })).status).toBe(200);
    expect(host.backend.stats().started).toBe(0);
  });

  it("a 1 MB token: the Fetch handler answers 401, the Node host a protocol 4xx; nothing crashes", async () => {
    const huge = `Bearer ${"t".repeat(1_048_576)}`;
    const handler = createBridge({ backend: createFakeBackend(), token: TOKEN, logger: () => {} });
    const direct = await handler(
      new Request("http://bridge/exec", {
        method: "POST",
        headers: { authorization: huge, "content-type": "application/json" },
        body: "{}",
      }),
    );
    expect(direct.status).toBe(401);
    expect(errorBodySchema.parse(await direct.json()).code).toBe("unauthorized");

    const port = Number(new URL(host.bridge.url).port);
    const raw = await rawExchange(
      port,
      Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: ${huge}\r\n\r\n`),
    );
    const text = raw.toString("latin1");
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(text)?.[1]);
    expect(status).toBeGreaterThanOrEqual(400);
    expect(status).toBeLessThan(500);
    const body = text.slice(text.indexOf("\r\n\r\n") + 4);
    expect(errorBodySchema.safeParse(JSON.parse(body)).success).toBe(true);
    // Still serving.
    expect((await call(host, "/health")).status).toBe(200);
  });

  it("the client turns a wrong token into an AuthenticationError that does not carry the token", async () => {
    const wrong = secret("wrong-token");
    const client = createClient({ url: host.bridge.url, token: wrong, retry: false });
    try {
      const error = await client.run("true").catch((e: unknown) => e);
      expect(AuthenticationError.isInstance(error)).toBe(true);
      expect(
        JSON.stringify({ message: (error as Error).message, stack: (error as Error).stack }),
      ).not.toContain(wrong);
    } finally {
      await client.close();
    }
  });
});

describe("the token comparison (packages/bridge/src/auth.ts)", () => {
  const timingSafeEqual = (given: string, token: string) => secretMatcher(token)(given);

  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("accepts only the identical string; position and length of a difference do not matter to the answer", async () => {
    const token = "0123456789abcdef0123456789abcdef";
    expect(await timingSafeEqual(token, token)).toBe(true);
    for (const other of [
      `X${token.slice(1)}`,
      `${token.slice(0, -1)}X`,
      `${token.slice(0, 16)}X${token.slice(17)}`,
      token.slice(1),
      `${token}0`,
      "",
      token.toUpperCase(),
    ]) {
      expect(await timingSafeEqual(other, token)).toBe(false);
    }
  });

  it("always hashes both whole inputs before comparing: no early exit on length or on the first differing byte", async () => {
    const token = "s".repeat(40);
    const inputs = [
      "x".repeat(40),
      `${"s".repeat(39)}x`,
      `x${"s".repeat(39)}`,
      "s",
      "s".repeat(4_000),
      "",
      token,
    ];
    for (const input of inputs) {
      const hash = vi.fn(sha256);
      await secretMatcher(token, hash)(input);
      // Two digests per first comparison, of the full inputs, whatever they are.
      expect(hash.mock.calls.map(([text]) => text.length).sort((a, b) => a - b)).toEqual(
        [input.length, token.length].sort((a, b) => a - b),
      );
    }
  });

  it("hashes the token once per matcher and every presented input whole, whatever it is", async () => {
    const hash = vi.fn(sha256);
    const token = "s".repeat(40);
    const matches = secretMatcher(token, hash);
    const inputs = ["x".repeat(40), `${"s".repeat(39)}x`, "s", "s".repeat(4_000), "", token];
    for (const input of inputs) await matches(input);
    // One digest of the token, then one of each whole input.
    expect(hash.mock.calls.map(([text]) => text).sort()).toEqual([token, ...inputs].sort());
  });

  it("hashes with SHA-256 of the UTF-8 bytes, as Web Crypto does, on any text", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: "binary", maxLength: 200 }), async (text) => {
        const expected = new Uint8Array(
          await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)),
        );
        expect([...(await sha256(text))]).toEqual([...expected]);
      }),
      fuzzParameters(200),
    );
  });

  it("agrees with string equality on arbitrary inputs", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 80 }),
        fc.string({ maxLength: 80 }),
        fc.boolean(),
        async (a, b, same) => {
          const right = same ? a : b;
          expect(await timingSafeEqual(a, right)).toBe(a === right);
        },
      ),
      fuzzParameters(300),
    );
  });
});

describe("secrets never reach a log line or an error body", () => {
  let host: TestBridge;
  beforeAll(async () => {
    host = await startTestBridge({
      token: TOKEN,
      limits: { maxEnvEntryBytes: 256, maxEnvEntries: 8 },
    });
  });
  afterAll(async () => {
    await host.close();
  });

  it("a mixed batch with env secrets: successes, failures, timeouts, invalid requests, bad tokens", async () => {
    const secrets: string[] = [TOKEN];
    const track = (label: string) => {
      const value = secret(label);
      secrets.push(value);
      return value;
    };
    const seen: string[] = [];
    const id = (() => {
      let n = 0;
      return () => `sec-batch-${n++}`;
    })();
    const exec = async (
      body: Record<string, unknown>,
      init: { authorization?: string; accept?: string; raw?: string } = {},
    ) => {
      const answer = await call(host, "/exec", { body: { sandboxId: id(), ...body }, ...init });
      seen.push(answer.text);
      return answer;
    };

    // Runs that reach the command (never printing the secret: output is the command's own business).
    expect(
      execResultSchema.parse(
        JSON.parse((await exec({ command: "true", env: { API_KEY: track("ok") } })).text),
      ).code,
    ).toBe(0);
    expect(
      (await exec({ command: "echo boom >&2; exit 7", env: { API_KEY: track("fail") } })).status,
    ).toBe(200);
    expect(
      (await exec({ command: "no-such-command-here", env: { API_KEY: track("missing") } })).status,
    ).toBe(200);
    expect(
      (await exec({ command: "sleep 5", timeoutSeconds: 0.3, env: { API_KEY: track("timeout") } }))
        .status,
    ).toBe(200);
    expect(
      (
        await exec(
          { command: "true", env: { API_KEY: track("sse") } },
          { accept: "text/event-stream" },
        )
      ).status,
    ).toBe(200);
    // Requests refused before or while starting.
    expectError(
      await exec({ command: "true", env: { "1BAD": track("badname") } }),
      "invalid_request",
    );
    expectError(
      await exec({ command: "true", env: { BIG: `${track("big")}${"x".repeat(300)}` } }),
      "invalid_request",
    );
    expectError(
      await exec({
        command: "true",
        env: Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`K${i}`, track(`many${i}`)])),
      }),
      "invalid_request",
    );
    expectError(
      await exec({ command: "true", cwd: "/etc", env: { API_KEY: track("cwd") } }),
      "invalid_request",
    );
    expectError(
      await exec({
        command: "true",
        env: { API_KEY: track("extra") },
        unknownField: track("unknown"),
      }),
      "invalid_request",
    );
    expectError(await exec({ command: "", env: { API_KEY: track("empty") } }), "invalid_request");
    // A value a process cannot receive (NUL): refused as the request's fault, and never echoed.
    const beforeNul = track("nul");
    const nul = await exec({ command: "true", env: { API_KEY: `${beforeNul}\u0000tail` } });
    // Not JSON at all, with a secret inside.
    const broken = await call(host, "/exec", {
      raw: `{"sandboxId":"sec-x","command":"true","env":{"K":"${track("broken")}"`,
    });
    seen.push(broken.text);
    expectError(broken, "invalid_request");
    // Wrong tokens must not be logged either.
    const wrong = track("wrongtoken");
    seen.push(
      (
        await call(host, "/exec", {
          body: { sandboxId: id(), command: "true" },
          authorization: `Bearer ${wrong}`,
        })
      ).text,
    );
    // And through the real client: its errors must not carry them.
    const client = createClient({ url: host.bridge.url, token: TOKEN, retry: false });
    try {
      for (const env of [
        { "bad-name": track("client1") },
        { K: `${track("client2")}\u0000` },
        { K: `${track("client3")}${"y".repeat(300)}` },
      ]) {
        const error = await client.run("true", { env }).catch((e: unknown) => e);
        expect(RemoteTaskError.isInstance(error)).toBe(true);
        const issues = (error as { issues?: unknown }).issues;
        seen.push(
          JSON.stringify({
            message: (error as Error).message,
            stack: (error as Error).stack,
            issues,
          }),
        );
      }
    } finally {
      await client.close();
    }

    await host.settled();
    const everything = [...host.logs.lines, ...seen];
    expect(host.logs.lines.length).toBeGreaterThanOrEqual(8);
    for (const value of secrets) {
      const leaks = everything.filter((text) => text.includes(value));
      expect(leaks, `secret ${value.split("-")[0]} leaked`).toEqual([]);
    }
    expect(nul.status, nul.text).toBe(400);
  });
});

describe("prototype keys in requests", () => {
  let host: TestBridge;
  beforeAll(async () => {
    host = await startTestBridge();
  });
  afterAll(async () => {
    await host.close();
  });

  it("`__proto__` and friends in the body or in env neither pollute the bridge nor crash it", async () => {
    const bodies = [
      '{"sandboxId":"proto-1","command":"env","env":{"__proto__":"x","constructor":"y","toString":"z"}}',
      '{"sandboxId":"proto-2","command":"env","env":{"__proto__":{"polluted":"yes"}}}',
      '{"sandboxId":"proto-3","command":"env","__proto__":{"polluted":"yes"}}',
      '{"sandboxId":"proto-4","command":"env","constructor":{"prototype":{"polluted":"yes"}}}',
    ];
    for (const raw of bodies) {
      const answer = await call(host, "/exec", { raw });
      expect(answer.status, answer.text).toBeLessThan(500);
      if (answer.status === 200) {
        const result = execResultSchema.parse(JSON.parse(answer.text));
        expect(result.stdout).not.toContain("polluted");
      } else expectError(answer, "invalid_request");
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty("polluted");
    expect((await call(host, "/health")).status).toBe(200);
    await host.settled();
  });
});

describe("cwd escapes are refused or confined", () => {
  let none: TestBridge;
  let bwrap: TestBridge | undefined;
  beforeAll(async () => {
    none = await startTestBridge({ isolation: "none" });
    if (!skipBwrap) bwrap = await startTestBridge({ isolation: "bwrap" });
  });
  afterAll(async () => {
    await none.close();
    await bwrap?.close();
  });

  const escapes = [
    "/workspace/../etc",
    "/workspace/../../",
    "/workspace/a/../../etc",
    "/etc",
    "/tmp",
    "/",
    "/work/main",
  ];

  it("without isolation every cwd outside /workspace is refused (400, path cwd) and nothing starts", async () => {
    for (const cwd of escapes) {
      const answer = await call(none, "/exec", {
        body: { sandboxId: "cwd-none", command: "pwd; touch escaped", cwd },
      });
      const error = expectError(answer, "invalid_request");
      expect(error.issues?.[0]?.path).toEqual(["cwd"]);
    }
    await none.settled();
  });

  it("without isolation, `..` inside /workspace stays inside the call's own directory", async () => {
    const answer = await call(none, "/exec", {
      body: { sandboxId: "cwd-none-ok", command: "pwd", cwd: "/workspace/./a/.." },
    });
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result.stdout.trim().startsWith(none.tmpRoot)).toBe(true);
    expect(result.stdout.trim().endsWith("/workspace")).toBe(true);
  });

  it.skipIf(skipBwrap)(
    "with bubblewrap, escapes land inside the sandbox or are refused: system directories read-only, the host's files invisible",
    async () => {
      const sandboxed = bwrap as TestBridge;
      for (const cwd of escapes) {
        const answer = await call(sandboxed, "/exec", {
          body: {
            sandboxId: "cwd-bwrap",
            command: "pwd; ls -A /; ls -A .; touch escaped-file && echo WROTE",
            cwd,
          },
        });
        // A directory the sandbox does not have (the host's /work/main) is refused, not made.
        if (answer.status === 400) {
          expect(expectError(answer, "invalid_request").issues?.[0]?.path).toEqual(["cwd"]);
          continue;
        }
        const result = execResultSchema.parse(JSON.parse(answer.text));
        const [pwd = ""] = result.stdout.split("\n");
        expect(pwd).toBe(posix.normalize(cwd).replace(/(.)\/$/, "$1"));
        // The host's own tree (this repository under /work) is not there.
        expect(result.stdout.split("\n")).not.toContain("node_modules");
        if (pwd === "/etc") expect(result.stdout).not.toContain("WROTE");
      }
      await sandboxed.settled();
      // Nothing was written on the host.
      for (const path of [
        "/etc/escaped-file",
        "/tmp/escaped-file",
        "/escaped-file",
        "/work/main/escaped-file",
      ])
        expect(existsSync(path)).toBe(false);
    },
  );

  it("each call is fresh: a symlink made by one call does not exist for the next", async () => {
    for (const host of bwrap === undefined ? [none] : [none, bwrap]) {
      await call(host, "/exec", {
        body: {
          sandboxId: "link-1",
          command: "ln -s /etc /workspace/link 2>/dev/null || ln -s /etc link; ls -la",
        },
      });
      const answer = await call(host, "/exec", {
        body: { sandboxId: "link-2", command: "pwd -P; ls -A", cwd: "/workspace/link" },
      });
      // The next call's /workspace is fresh: the link is not there, so that cwd is refused.
      expect(expectError(answer, "invalid_request").issues?.[0]?.path).toEqual(["cwd"]);
      await host.settled();
    }
  });
});

describe("the host environment is never visible inside a task", () => {
  const canaryName = `RT_CANARY_${randomBytes(6).toString("hex").toUpperCase()}`;
  const canaryValue = secret("canary");

  for (const isolation of ["none", "bwrap"] as const) {
    it.skipIf(isolation === "bwrap" && skipBwrap)(
      `isolation ${isolation}: env shows the sandbox's own variables and the request's, not the bridge's`,
      async () => {
        process.env[canaryName] = canaryValue;
        const host = await startTestBridge({ isolation });
        try {
          const answer = await call(host, "/exec", {
            body: { sandboxId: "env-check", command: "env", env: { GIVEN: "yes" } },
          });
          const result = execResultSchema.parse(JSON.parse(answer.text));
          const names = result.stdout.split("\n").map((line) => line.split("=")[0]);
          expect(names).toContain("PATH");
          expect(names).toContain("GIVEN");
          expect(result.stdout).not.toContain(canaryName);
          expect(result.stdout).not.toContain(canaryValue);
          // Nothing else of the bridge's environment either (HOME points into the sandbox).
          for (const name of ["npm_config_cache", "INIT_CWD", "VITEST", "NODE_OPTIONS"])
            expect(names).not.toContain(name);
          expect(result.stdout).not.toContain(`HOME=${process.env.HOME}\n`);
        } finally {
          delete process.env[canaryName];
          await host.close();
        }
      },
    );
  }
});

describe("a root bridge is no way to host root (issue 12, finding 1)", () => {
  const root = process.getuid?.() === 0;

  for (const isolation of ["none", "bwrap"] as const) {
    it.skipIf(isolation === "bwrap" && skipBwrap)(
      `isolation ${isolation}: the probes that reached host root get nowhere, and the command's host uid is not 0`,
      async () => {
        const host = await startTestBridge({ isolation });
        const marker = `1000.${process.pid}${randomBytes(3).readUIntBE(0, 3)}`;
        const corePattern = readFileSync("/proc/sys/kernel/core_pattern", "utf8");
        try {
          const probe = [
            // The exploit of the finding: a core_pattern pipe runs as root in the host's namespaces.
            `(echo '|/bin/sh -c "touch /tmp/rt-pwned-${marker}"' > /proc/sys/kernel/core_pattern) 2>/dev/null && echo core_pattern-written`,
            "cat /etc/shadow 2>/dev/null && echo shadow-read",
            ...["pids", "memory", "unified"].map(
              (h) =>
                `mkdir /sys/fs/cgroup/${h}/rt-pwned-${marker} 2>/dev/null && echo cgroup-${h}-made`,
            ),
            `sleep ${marker} & echo probed`,
          ].join("; ");
          const background = call(host, "/exec", {
            body: {
              sandboxId: `root-probe-${isolation}`,
              command: `${probe}; wait`,
              timeoutSeconds: 30,
            },
          });
          let sleeper: number | undefined;
          await waitFor(() => {
            sleeper = processList().find(
              (p) => p.comm === "sleep" && commandLine(p.pid).includes(marker),
            )?.pid;
            return sleeper !== undefined;
          }, 10_000);
          const uids = (
            /^Uid:\s+(.*)$/m.exec(readFileSync(`/proc/${sleeper}/status`, "utf8"))?.[1] ?? ""
          )
            .split(/\s+/)
            .map(Number);
          expect(uids).toHaveLength(4);
          for (const uid of uids) expect(uid).not.toBe(0);
          if (root) expect(uids[0]).not.toBe(process.getuid?.());
          await call(host, "/cancel", { body: { sandboxId: `root-probe-${isolation}` } });
          const answer = await background;
          const result = execResultSchema.parse(JSON.parse(answer.text));
          expect(result.stdout).toBe("probed\n");
          expect(readFileSync("/proc/sys/kernel/core_pattern", "utf8")).toBe(corePattern);
          for (const h of ["pids", "memory", "unified"])
            expect(existsSync(`/sys/fs/cgroup/${h}/rt-pwned-${marker}`)).toBe(false);
          expect(existsSync(`/tmp/rt-pwned-${marker}`)).toBe(false);
        } finally {
          await host.close();
        }
      },
    );
  }
});

describe("descriptors the bridge inherited never reach a command (issue 12, finding 6)", () => {
  for (const isolation of ["none", "bwrap"] as const) {
    it.skipIf(isolation === "bwrap" && skipBwrap)(
      `isolation ${isolation}: fds 9 and 251 of the bridge are /dev/null in the command, and nothing written there arrives`,
      async () => {
        const bridge = await startBridgeProcess(isolation, { inheritedDescriptors: [9, 251] });
        const received: string[] = [];
        for (const end of bridge.inherited.values())
          end.on("data", (d: Buffer) => received.push(d.toString()));
        try {
          const answer = await call({ bridge }, "/exec", {
            body: {
              sandboxId: `fd-probe-${isolation}`,
              // `ls` lists the shell's descriptors while the shell holds nothing else open (not
              // the last command: bash would run that one in its own process, in place of itself).
              command: "echo leaked >&9; ls -l /proc/$$/fd; true",
            },
          });
          const result = execResultSchema.parse(JSON.parse(answer.text));
          const fds = new Map(
            [...result.stdout.matchAll(/ (\d+) -> (.*)$/gm)].map(([, fd, target]) => [fd, target]),
          );
          expect([...fds.keys()]).toEqual(expect.arrayContaining(["0", "1", "2"]));
          for (const [fd, target] of fds)
            if (Number(fd) > 2) expect(target, `fd ${fd}`).toBe("/dev/null");
          expect(fds.get("251")).toBe("/dev/null");
          await new Promise((resolve) => setTimeout(resolve, 100));
          expect(received).toEqual([]);
        } finally {
          await bridge.close();
        }
      },
    );
  }
});
