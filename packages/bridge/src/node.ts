import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Duplex } from "node:stream";
import { getRequestListener } from "@hono/node-server";
import { BRIDGE_TEXTS, requireIntegerAtLeast } from "@remote-task/internal";
import type { Limits } from "@remote-task/protocol";
import type { SandboxBackend } from "./backend.js";
import { createBridge } from "./bridge.js";
import type { CorsOptions } from "./cors.js";
import {
  createDockerBackend,
  type DockerBackend,
  type DockerBackendOptions,
} from "./docker/index.js";
import {
  type AdmissionOptions,
  DEFAULT_NODE_DISCONNECT_GRACE_SECONDS,
  type DurableOptions,
} from "./limits.js";
import { createLocalBackend, type LocalBackendOptions } from "./local/index.js";
import { type BridgeLogger, stderrLogger } from "./logger.js";
import type { NetworkOptions } from "./network.js";
import { errorBody, errorResponse } from "./responses.js";
import { readSecretFromEnv, type SecretReader, type SecretsOptions } from "./secrets.js";

export interface EmbeddedBridgeOptions<B extends SandboxBackend = SandboxBackend> {
  /** Port to listen on (default: a random free port). */
  port?: number | undefined;
  /** Interface to listen on (default `127.0.0.1`). */
  host?: string | undefined;
  /** Bearer token (default: 32 random bytes, base64url). */
  token?: string | undefined;
  /** Backend (default: `createLocalBackend({ isolation: "auto", ...local })`). */
  backend?: B | undefined;
  /**
   * Options of the default local backend (isolation, per-sandbox limits, uids...); ignored when
   * `backend` is given. That backend is closed with the bridge.
   */
  local?: LocalBackendOptions | undefined;
  /**
   * Run each call in a fresh container of a Docker or Podman engine instead: the docker
   * backend's options. The bridge creates that backend, waits until its engine and image are
   * ready, and closes it with the bridge. Ignored when `backend` is given.
   */
  docker?: DockerBackendOptions | undefined;
  /** Serve without a token; `token` is then ignored. */
  allowUnauthenticated?: boolean | undefined;
  limits?: Partial<Limits> | undefined;
  /** Most calls running and waiting (default: `defaultAdmission()` for this machine). */
  admission?: AdmissionOptions | undefined;
  /**
   * The network policy of a call that names none and the most a call may ask for (default
   * `none` for both); only with a backend that controls network access (local: bwrap).
   */
  network?: NetworkOptions | undefined;
  /** Secrets a call may ask for by name (see secrets.ts); local with bubblewrap, or docker. */
  secrets?: SecretsOptions | undefined;
  /** Web origins whose browser pages may call the bridge (CORS; default: none). */
  cors?: CorsOptions | undefined;
  heartbeatIntervalMs?: number | undefined;
  /**
   * Durable calls (on by default here): outcomes kept `keptSeconds` (600), within `maxKept`
   * (4096) calls and `maxKeptBytes` (128 MiB), and a caller that lost its connection has
   * `disconnectGraceSeconds` (10) to re-attach. `false` turns them off.
   */
  durable?: DurableOptions | false | undefined;
  /** Most bytes of events queued for a streamed call's reader (default 256 KiB). */
  streamBufferBytes?: number | undefined;
  /** Receives one entry per call (default `stderrLogger`: JSON lines on stderr). */
  logger?: BridgeLogger | undefined;
  /** Limits on the HTTP connections the server keeps (defaults: {@link DEFAULT_CONNECTION_LIMITS}). */
  connections?: ConnectionLimitOptions | undefined;
}

/**
 * What the Node host allows a connection, so idle or slow sockets cannot take the bridge down.
 * None of them cuts a response being sent: a streamed call may run its full timeout.
 */
export interface ConnectionLimits {
  /**
   * Most connections open at once; beyond them new ones are closed as they are accepted. When
   * the open ones reach 90% of it, those idle longest (no request in progress) are closed down
   * to 75%, so a flood of idle sockets cannot keep `/health` and `/exec` out.
   */
  maxConnections: number;
  /** Time a connection has to send a request's headers, from when it opens or goes idle. */
  headersTimeoutMs: number;
  /** Time a request has to arrive whole (headers and body); the answer may take longer. */
  requestTimeoutMs: number;
  /** Time an idle kept-alive connection stays open after an answer. */
  keepAliveTimeoutMs: number;
  /**
   * Least average rate, in bytes per second, at which a request's body must arrive once it has
   * had `headersTimeoutMs`; a slower upload is closed (an upload that trickles in is never idle,
   * so neither the idle eviction nor a timeout shorter than `requestTimeoutMs` would end it).
   */
  minUploadBytesPerSecond: number;
}

export type ConnectionLimitOptions = { [K in keyof ConnectionLimits]?: number | undefined };

export interface EmbeddedBridge<B extends SandboxBackend = SandboxBackend> {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** The bearer token clients must send (empty when unauthenticated). */
  token: string;
  backend: B;
  /**
   * Cancels calls in flight (each caller gets its call's cancelled answer), destroys their
   * sandboxes, closes the server, and closes the backend it created (`local`, `docker`, or the default).
   */
  close(): Promise<void>;
}

/** The Node host's connection limits when none are given. */
export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = Object.freeze({
  maxConnections: 2_048,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
  minUploadBytesPerSecond: 1_024,
});

function resolveConnectionLimits(options: ConnectionLimitOptions = {}): ConnectionLimits {
  const limits = { ...DEFAULT_CONNECTION_LIMITS };
  for (const key of Object.keys(limits) as Array<keyof ConnectionLimits>) {
    const value = options[key];
    if (value === undefined) continue;
    limits[key] = requireIntegerAtLeast(`connections.${key}`, value, 1);
  }
  if (limits.requestTimeoutMs < limits.headersTimeoutMs) {
    throw new TypeError(
      "connections.requestTimeoutMs must be at least connections.headersTimeoutMs.",
    );
  }
  return limits;
}

/**
 * The HTTP server of the Node host, with its connection limits: Node's header, request and
 * keep-alive timeouts (checked every second) and its cap on connections, plus what Node leaves
 * out: a connection that sends nothing at all is closed after `headersTimeoutMs` too; a request
 * whose body arrives slower than `minUploadBytesPerSecond` (on average, once it has had
 * `headersTimeoutMs`) is closed; and as the open connections near the cap, those idle longest
 * (no request in progress) are closed to make room, then those still uploading, slowest first.
 * No inactivity timeout once a request has arrived: a JSON call is silent on its connection while
 * its command runs (up to `maxTimeoutSeconds`).
 */
function createLimitedServer(
  listener: Parameters<typeof createServer>[1],
  limits: ConnectionLimits,
): Server {
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: 1_000,
    },
    listener,
  );
  server.maxConnections = limits.maxConnections;
  const evictAt = Math.max(1, Math.floor(limits.maxConnections * 0.9));
  const evictTo = Math.floor(limits.maxConnections * 0.75);
  let open = 0;
  /** Connections with no request in progress, idle longest first. */
  const idle = new Set<Socket>();
  /** Connections whose request's body is still arriving: its bytes read and when it began. */
  type Upload = { request: IncomingMessage; from: number; since: number };
  const uploading = new Map<Socket, Upload>();
  const uploadRate = (socket: Socket, upload: Upload, now: number) =>
    ((socket.bytesRead - upload.from) * 1000) / Math.max(1, now - upload.since);
  /** Drops the uploads whose body has arrived whole. */
  const stillUploading = () => {
    for (const [socket, upload] of uploading) if (upload.request.complete) uploading.delete(socket);
    return uploading;
  };
  const slowUploads = setInterval(() => {
    const now = Date.now();
    for (const [socket, upload] of stillUploading()) {
      if (now - upload.since < limits.headersTimeoutMs) continue;
      if (uploadRate(socket, upload, now) < limits.minUploadBytesPerSecond) socket.destroy();
    }
  }, 1_000);
  slowUploads.unref();
  server.once("close", () => clearInterval(slowUploads));
  server.on("connection", (socket: Socket) => {
    open++;
    idle.add(socket);
    // Until its first request (Node's own timeouts start at the first byte).
    socket.setTimeout(limits.headersTimeoutMs);
    socket.once("close", () => {
      open--;
      idle.delete(socket);
      uploading.delete(socket);
    });
    if (open < evictAt) return;
    let excess = open - evictTo;
    const now = Date.now();
    const slowestUploads = [...stillUploading()]
      .sort(([a, x], [b, y]) => uploadRate(a, x, now) - uploadRate(b, y, now))
      .map(([other]) => other);
    for (const other of [...idle, ...slowestUploads]) {
      if (excess <= 0) break;
      if (other === socket || other.destroyed) continue;
      other.destroy();
      excess--;
    }
  });
  server.on("request", (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket as Socket;
    idle.delete(socket);
    socket.setTimeout(0);
    if (!request.complete)
      uploading.set(socket, { request, from: socket.bytesRead, since: Date.now() });
    response.once("close", () => {
      uploading.delete(socket);
      if (!socket.destroyed) idle.add(socket);
    });
  });
  return server;
}

/**
 * Requests Node's HTTP parser rejects (unknown methods, malformed headers) never reach the
 * bridge; answer them with a protocol error body too.
 */
function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === "ECONNRESET" || !socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify(
    errorBody("invalid_request", BRIDGE_TEXTS.unparsableRequest, {
      issues: [{ path: [], message: BRIDGE_TEXTS.malformedRequestIssue }],
    }),
  );
  socket.end(
    `HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/** Longest wait on close for the answers of cancelled calls to be written. */
const ANSWER_DRAIN_MS = 2_000;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

/** A docker backend whose engine and image answered; closed again when they did not. */
async function readyDockerBackend(options: DockerBackendOptions): Promise<DockerBackend> {
  const backend = createDockerBackend(options);
  try {
    await backend.ready;
  } catch (error) {
    await backend.close();
    throw error;
  }
  return backend;
}

/** A secret's value on this host: a variable of the bridge's environment, or a file's text. */
const readSecretOnHost: SecretReader = async (source) => {
  if ("env" in source) return readSecretFromEnv(source);
  // The file's text without its final line break (as `echo value > file` writes it).
  return (await readFile(source.file, "utf8")).replace(/\r?\n$/, "");
};

/** Serves a bridge over HTTP on loopback; the embedded default for development and tests. */
export async function startEmbeddedBridge<
  B extends SandboxBackend = ReturnType<typeof createLocalBackend>,
>(options: EmbeddedBridgeOptions<B> = {}): Promise<EmbeddedBridge<B>> {
  const connectionLimits = resolveConnectionLimits(options.connections);
  const host = options.host ?? "127.0.0.1";
  const unauthenticated = options.allowUnauthenticated === true;
  const token = unauthenticated ? "" : (options.token ?? randomBytes(32).toString("base64url"));
  const ownBackend =
    options.backend !== undefined
      ? undefined
      : options.docker !== undefined
        ? await readyDockerBackend(options.docker)
        : createLocalBackend({ isolation: "auto", ...options.local });
  const backend = (options.backend ?? ownBackend) as B;
  let bridge: ReturnType<typeof createBridge>;
  try {
    bridge = createBridge({
      backend,
      ...(unauthenticated ? { allowUnauthenticated: true } : { token }),
      limits: options.limits,
      admission: options.admission,
      network: options.network,
      secrets: options.secrets,
      readSecret: readSecretOnHost,
      cors: options.cors,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      durable:
        options.durable === false
          ? undefined
          : {
              ...options.durable,
              disconnectGraceSeconds:
                options.durable?.disconnectGraceSeconds ?? DEFAULT_NODE_DISCONNECT_GRACE_SECONDS,
            },
      streamBufferBytes: options.streamBufferBytes,
      logger: options.logger ?? stderrLogger,
    });
  } catch (error) {
    await ownBackend?.close();
    throw error;
  }

  const listener = getRequestListener(
    (request, env) =>
      bridge(request, {
        client: "incoming" in env ? env.incoming.socket.remoteAddress : undefined,
      }),
    {
      // Leave the embedding program's global Request/Response alone.
      overrideGlobalObjects: false,
      // A request Node accepted that cannot become a Fetch Request (e.g. a bad Host header).
      errorHandler: () =>
        errorResponse("invalid_request", BRIDGE_TEXTS.unreadableRequest, {
          issues: [{ path: [], message: BRIDGE_TEXTS.malformedRequestIssue }],
        }),
    },
  );
  const server = createLimitedServer(listener, connectionLimits);
  // Answers still being written: close() lets them finish (a cancelled call's answer included).
  const answering = new Set<Promise<void>>();
  server.on("request", (_request, response: ServerResponse) => {
    const done = new Promise<void>((resolve) => response.once("close", () => resolve()));
    answering.add(done);
    void done.then(() => answering.delete(done));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  }).catch(async (error: unknown) => {
    await ownBackend?.close();
    throw error;
  });
  server.on("clientError", answerClientError);
  const { port } = server.address() as AddressInfo;
  // A sandbox with network access must still not reach the bridge that runs it.
  backend.excludeFromEgress?.({ host, port });

  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost(host)}:${port}`,
    token,
    backend,
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await bridge.shutdown();
        // Each call in flight has ended cancelled: let its answer reach the caller before the
        // connections close (bounded, for a caller that stopped reading).
        await Promise.race([Promise.all(answering), delay(ANSWER_DRAIN_MS)]);
        server.closeAllConnections();
        await closed;
        await ownBackend?.close();
      })();
      return closing;
    },
  };
}
