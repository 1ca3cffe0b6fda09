/**
 * Pins the stand-in container server's wire: what `@cloudflare/sandbox` 0.12.10 sends and reads
 * (its CommandClient and parseSSEStream, @cloudflare/containers' readiness probe, the version
 * check), and the real server's behaviours the Worker has to live with. Runs the stand-in as the
 * harness runs it: in a bubblewrap container, reached through the relay.
 */
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Container } from "../harness/container.ts";
import { sdkVersion, standInImage } from "../harness/images.ts";

let container: Container;

beforeAll(async () => {
  container = await Container.start({ image: standInImage(), env: ["FROM_CREATE=yes"] });
});

afterAll(async () => {
  await container?.remove();
});

interface Reply {
  status: number;
  contentType: string;
  text: string;
  ms: number;
}

/** One HTTP request to the container's port 3000, through the relay (retried while it boots). */
async function send(method: string, path: string, body?: unknown): Promise<Reply> {
  const started = Date.now();
  let socket = await container.connect(3000);
  for (let i = 0; socket === undefined && i < 100; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket = await container.connect(3000);
  }
  if (socket === undefined) throw new Error("the stand-in never listened on port 3000");
  const connected = socket;
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        method,
        path,
        createConnection: () => connected,
        headers: payload === undefined ? {} : { "content-type": "application/json" },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: String(res.headers["content-type"] ?? ""),
            text: Buffer.concat(chunks).toString("utf8"),
            ms: Date.now() - started,
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(payload);
    // The relay hands the socket over paused.
    connected.resume();
  });
}

type Frame = { type: string; data?: string; exitCode?: number; timestamp: string };

/** The SSE body as the SDK's parseSSEStream reads it: `data:` lines, blank-line separated. */
function frames(text: string): Frame[] {
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .split("\n\n")
    .filter((block) => block.length > 0)
    .map((block) => {
      expect(block.startsWith("data: ")).toBe(true);
      return JSON.parse(block.slice("data: ".length)) as Frame;
    });
}

/** All the text of one stream, however the server chunked it. */
function output(events: Frame[], stream: "stdout" | "stderr"): string {
  return events
    .filter((e) => e.type === stream)
    .map((e) => e.data)
    .join("");
}

function exec(command: string, extra: Record<string, unknown> = {}) {
  return send("POST", "/api/execute/stream", {
    command,
    sessionId: "__DISABLE_SESSION__",
    ...extra,
  });
}

describe("stand-in container server", () => {
  it("answers the readiness probe on / and the version check", async () => {
    expect((await send("GET", "/")).status).toBe(200);
    const version = await send("GET", "/api/version");
    expect(version.status).toBe(200);
    expect(JSON.parse(version.text)).toMatchObject({ success: true, version: sdkVersion() });
  });

  it("streams start, stdout, stderr and complete with the exit code", async () => {
    const reply = await exec("echo out; echo err >&2; exit 3", {
      timeoutMs: 60_000,
      origin: "user",
    });
    expect(reply.status).toBe(200);
    expect(reply.contentType).toBe("text/event-stream");
    const events = frames(reply.text);
    expect(events[0]?.type).toBe("start");
    expect(output(events, "stdout")).toBe("out\n");
    expect(output(events, "stderr")).toBe("err\n");
    expect(events.filter((e) => e.type === "complete")).toHaveLength(1);
    expect(events.at(-1)?.exitCode).toBe(3);
    for (const event of events) expect(Date.parse(event.timestamp)).not.toBeNaN();
  });

  it("runs in /workspace by default, or in cwd, with the server's environment plus env", async () => {
    const reply = await exec('pwd; echo "$FROM_CREATE $GIVEN"', { env: { GIVEN: "given" } });
    expect(output(frames(reply.text), "stdout")).toBe("/workspace\nyes given\n");
    const inTmp = await exec("pwd", { cwd: "/tmp" });
    expect(output(frames(inTmp.text), "stdout")).toBe("/tmp\n");
  });

  it("sends output as UTF-8 text: invalid bytes arrive as U+FFFD", async () => {
    const reply = await exec("printf '\\377\\376\\000\\001\\002'");
    expect(output(frames(reply.text), "stdout")).toBe("\ufffd\ufffd\u0000\u0001\u0002");
  });

  it("completes only once every holder of the output pipes is gone, as the real server", async () => {
    const reply = await exec("(sleep 1 &); echo quick");
    const events = frames(reply.text);
    expect(events.at(-1)).toMatchObject({ type: "complete", exitCode: 0 });
    expect(reply.ms).toBeGreaterThanOrEqual(1_000);
  });

  it("ignores timeoutMs on the stream route, as the real server", async () => {
    const reply = await exec("sleep 1; echo finished", { timeoutMs: 100 });
    const events = frames(reply.text);
    expect(output(events, "stdout")).toBe("finished\n");
    expect(events.at(-1)).toMatchObject({ type: "complete", exitCode: 0 });
  });

  it("answers a missing cwd with the real server's 500, which blames /bin/bash", async () => {
    const reply = await exec("pwd", { cwd: "/no/such/dir" });
    expect(reply.status).toBe(500);
    const body = JSON.parse(reply.text);
    expect(body).toMatchObject({ code: "STREAM_START_ERROR", httpStatus: 500 });
    expect(body.message).toContain("posix_spawn '/bin/bash'");
  });

  it("writes a file from base64 byte for byte (the SDK's writeFile), as the real server", async () => {
    const bytes = Buffer.from([0, 1, 2, 0x80, 0xfe, 0xff, 10]);
    const path = "/tmp/written-by-test";
    const reply = await send("POST", "/api/write", {
      path,
      content: bytes.toString("base64"),
      sessionId: "__DISABLE_SESSION__",
      encoding: "base64",
    });
    expect(reply.status).toBe(200);
    expect(JSON.parse(reply.text)).toMatchObject({ success: true, path });
    const dump = await exec(`od -An -tx1 ${path} | tr -d ' \n'`);
    expect(output(frames(dump.text), "stdout")).toBe(bytes.toString("hex"));
    const invalid = await send("POST", "/api/write", {
      path,
      content: "not base64!",
      sessionId: "__DISABLE_SESSION__",
      encoding: "base64",
    });
    expect(invalid.status).toBe(400);
    expect(JSON.parse(invalid.text)).toMatchObject({ code: "VALIDATION_FAILED" });
  });

  it("fails loudly on a request it does not implement", async () => {
    const before = container.log.length;
    const route = await send("GET", "/api/ping");
    expect(route.status).toBe(501);
    const session = await exec("pwd", { sessionId: "default" });
    expect(session.status).toBe(501);
    const shape = await send("POST", "/api/execute/stream", { command: "pwd", unknownField: 1 });
    expect(shape.status).toBe(501);
    await expect
      .poll(() => container.log.slice(before).match(/STAND-IN UNKNOWN REQUEST/g)?.length ?? 0)
      .toBe(3);
  });
});
