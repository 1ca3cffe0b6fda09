/**
 * The project's stand-in for the container server of `@cloudflare/sandbox` (the program the
 * SDK's image runs on port 3000), used by the harness suite in CI. It implements only what
 * `@cloudflare/sandbox` 0.12.10 uses to start a container, run one command with `execStream`
 * and destroy it, learned from the SDK's client code and behaving as the real server does
 * where the Worker can tell (test/stand-in-server/server.test.ts pins that wire):
 *
 * - `GET /` (the readiness probes of @cloudflare/containers): 200 text.
 * - `GET /api/version` (the SDK's version check after start): `{success, version, timestamp}`
 *   with `SANDBOX_VERSION` from the environment, as the real image sets it.
 * - `POST /api/execute/stream` with `sessionId: "__DISABLE_SESSION__"`: `/bin/bash -c command`
 *   in its own process group, `cwd` (default /workspace), the server's environment plus `env`;
 *   SSE `data:` frames `start`, `stdout`/`stderr` (output decoded as UTF-8 text, invalid bytes
 *   becoming U+FFFD), then `complete` with the exit code once the shell has exited and both
 *   pipes are closed. Like the real server it ignores `timeoutMs` on this route and does not
 *   stop the command when the client goes away. A spawn failure (a missing cwd) answers HTTP 500
 *   `STREAM_START_ERROR`, whose message, like the real one, blames `/bin/bash`.
 * - `POST /api/write` with `sessionId: "__DISABLE_SESSION__"` (the SDK's `writeFile`, which the
 *   Worker uses for a call's stdin): writes `content` to the absolute `path`, decoded from base64
 *   when `encoding` is `base64` (content other than base64 characters answers 400
 *   `VALIDATION_FAILED`, as the real server does); answers `{success, path, timestamp}`.
 *
 * Any other request answers 501 and is written to stderr as `STAND-IN UNKNOWN REQUEST`, which the
 * harness reports as a failure: an SDK upgrade that changes the wire fails the suite instead of
 * passing silently.
 *
 * Runs on Node's type stripping inside a harness container: node: modules only.
 */
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { constants } from "node:os";

const SESSIONLESS = "__DISABLE_SESSION__";
const DEFAULT_CWD = "/workspace";
const port = Number(process.env.STAND_IN_PORT ?? 3000);

interface ExecuteRequest {
  command: string;
  sessionId?: string;
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  origin?: string;
}

function json(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { "content-type": "application/json" });
  response.end(JSON.stringify(body));
}

function unknown(request: IncomingMessage, response: ServerResponse, why: string): void {
  process.stderr.write(`STAND-IN UNKNOWN REQUEST: ${request.method} ${request.url} (${why})\n`);
  json(response, 501, { success: false, error: `stand-in server: ${why}` });
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function isExecuteRequest(value: unknown): value is ExecuteRequest {
  if (typeof value !== "object" || value === null) return false;
  const body = value as Record<string, unknown>;
  const known = new Set(["command", "sessionId", "cwd", "env", "timeoutMs", "origin"]);
  return (
    typeof body.command === "string" &&
    Object.keys(body).every((key) => known.has(key)) &&
    (body.cwd === undefined || typeof body.cwd === "string") &&
    (body.env === undefined || (typeof body.env === "object" && body.env !== null))
  );
}

interface WriteRequest {
  path: string;
  content: string;
  sessionId?: string;
  encoding?: string;
}

function isWriteRequest(value: unknown): value is WriteRequest {
  if (typeof value !== "object" || value === null) return false;
  const body = value as Record<string, unknown>;
  const known = new Set(["path", "content", "sessionId", "encoding"]);
  return (
    typeof body.path === "string" &&
    body.path.startsWith("/") &&
    typeof body.content === "string" &&
    Object.keys(body).every((key) => known.has(key)) &&
    (body.encoding === undefined || ["base64", "utf-8", "utf8"].includes(body.encoding as string))
  );
}

async function write(body: WriteRequest, response: ServerResponse): Promise<void> {
  const base64 = body.encoding === "base64";
  if (base64 && !/^[A-Za-z0-9+/=]*$/.test(body.content)) {
    json(response, 400, {
      code: "VALIDATION_FAILED",
      message: `Invalid base64 content for '${body.path}': must contain only A-Z, a-z, 0-9, +, /, =`,
      httpStatus: 400,
      timestamp: new Date().toISOString(),
    });
    return;
  }
  await writeFile(body.path, base64 ? Buffer.from(body.content, "base64") : body.content);
  json(response, 200, { success: true, path: body.path, timestamp: new Date().toISOString() });
}

function frame(event: Record<string, unknown>): string {
  return `data: ${JSON.stringify({ ...event, timestamp: new Date().toISOString() })}\n\n`;
}

function executeStream(body: ExecuteRequest, response: ServerResponse): void {
  const child = spawn("/bin/bash", ["-c", body.command], {
    cwd: body.cwd ?? DEFAULT_CWD,
    env: { ...process.env, ...body.env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  child.once("error", (error) => {
    // What the real server answers when Bun.spawn throws (e.g. ENOENT for a missing cwd).
    const reason =
      (error as NodeJS.ErrnoException).code === "ENOENT"
        ? "ENOENT: no such file or directory, posix_spawn '/bin/bash'"
        : error.message;
    const message = `Failed to execute streaming command '${body.command}' in sessionless execution: ${reason}`;
    json(response, 500, {
      code: "STREAM_START_ERROR",
      message,
      context: { command: body.command, stderr: reason },
      httpStatus: 500,
      timestamp: new Date().toISOString(),
    });
  });
  child.once("spawn", () => {
    response.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      connection: "keep-alive",
    });
    const send = (text: string) => {
      if (!response.destroyed) response.write(text);
    };
    send(frame({ type: "start", command: body.command, pid: child.pid }));
    let open = 2;
    let exitCode: number | undefined;
    const finish = () => {
      if (open > 0 || exitCode === undefined) return;
      send(frame({ type: "complete", exitCode }));
      response.end();
    };
    for (const name of ["stdout", "stderr"] as const) {
      const stream = child[name];
      stream.setEncoding("utf8");
      stream.on("data", (data: string) => send(frame({ type: name, data })));
      stream.once("close", () => {
        open--;
        finish();
      });
    }
    child.once("exit", (code, signal) => {
      exitCode = code ?? 128 + (signal === null ? 0 : constants.signals[signal]);
      finish();
    });
  });
}

const server = createServer((request, response) => {
  const path = (request.url ?? "").split("?")[0];
  if (request.method === "GET" && path === "/") {
    response.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    response.end("remote-task stand-in container server\n");
    return;
  }
  if (request.method === "GET" && path === "/api/version") {
    json(response, 200, {
      success: true,
      version: process.env.SANDBOX_VERSION ?? "unknown",
      timestamp: new Date().toISOString(),
    });
    return;
  }
  if (request.method === "POST" && path === "/api/execute/stream") {
    readJson(request).then(
      (body) => {
        if (!isExecuteRequest(body)) return unknown(request, response, "unexpected body shape");
        if (body.sessionId !== SESSIONLESS) {
          return unknown(request, response, `sessions are not implemented (${body.sessionId})`);
        }
        executeStream(body, response);
      },
      () => unknown(request, response, "body is not JSON"),
    );
    return;
  }
  if (request.method === "POST" && path === "/api/write") {
    readJson(request).then(
      (body) => {
        if (!isWriteRequest(body)) return unknown(request, response, "unexpected body shape");
        if (body.sessionId !== SESSIONLESS) {
          return unknown(request, response, `sessions are not implemented (${body.sessionId})`);
        }
        write(body, response).catch((error: unknown) =>
          json(response, 500, {
            code: "FILESYSTEM_ERROR",
            message: `Failed to write file '${body.path}': ${String(error)}`,
            httpStatus: 500,
            timestamp: new Date().toISOString(),
          }),
        );
      },
      () => unknown(request, response, "body is not JSON"),
    );
    return;
  }
  unknown(request, response, "route not implemented");
});

server.listen(port, "0.0.0.0");
