import { randomBytes } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { getRequestListener } from "@hono/node-server";
import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { Limits } from "@remote-task/protocol";
import type { SandboxBackend } from "./backend.js";
import { createBridge } from "./bridge.js";
import type { AdmissionOptions } from "./limits.js";
import { createLocalBackend, type LocalBackend, type LocalBackendOptions } from "./local/index.js";
import { type BridgeLogger, stderrLogger } from "./logger.js";
import type { NetworkOptions } from "./network.js";
import { errorBody, errorResponse } from "./responses.js";

export interface LocalBridgeOptions<B extends SandboxBackend = SandboxBackend> {
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
  heartbeatIntervalMs?: number | undefined;
  /** Most bytes of events queued for a streamed call's reader (default 256 KiB). */
  streamBufferBytes?: number | undefined;
  /** Receives one entry per call (default `stderrLogger`: JSON lines on stderr). */
  logger?: BridgeLogger | undefined;
}

export interface LocalBridge<B extends SandboxBackend = SandboxBackend> {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** The bearer token clients must send (empty when unauthenticated). */
  token: string;
  backend: B;
  /**
   * Cancels calls in flight (each caller gets its call's cancelled answer), destroys their
   * sandboxes, closes the server, and closes the backend it created (`local`, or the default).
   */
  close(): Promise<void>;
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

/** Serves a bridge over HTTP on loopback; the embedded default for development and tests. */
export async function startLocalBridge<
  B extends SandboxBackend = ReturnType<typeof createLocalBackend>,
>(options: LocalBridgeOptions<B> = {}): Promise<LocalBridge<B>> {
  const host = options.host ?? "127.0.0.1";
  const unauthenticated = options.allowUnauthenticated === true;
  const token = unauthenticated ? "" : (options.token ?? randomBytes(32).toString("base64url"));
  const ownBackend =
    options.backend === undefined
      ? createLocalBackend({ isolation: "auto", ...options.local })
      : undefined;
  const backend = (options.backend ?? ownBackend) as B;
  let bridge: ReturnType<typeof createBridge>;
  try {
    bridge = createBridge({
      backend,
      ...(unauthenticated ? { allowUnauthenticated: true } : { token }),
      limits: options.limits,
      admission: options.admission,
      network: options.network,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      streamBufferBytes: options.streamBufferBytes,
      logger: options.logger ?? stderrLogger,
    });
  } catch (error) {
    await ownBackend?.close();
    throw error;
  }

  const listener = getRequestListener((request) => bridge(request), {
    // Leave the embedding program's global Request/Response alone.
    overrideGlobalObjects: false,
    // A request Node accepted that cannot become a Fetch Request (e.g. a bad Host header).
    errorHandler: () =>
      errorResponse("invalid_request", BRIDGE_TEXTS.unreadableRequest, {
        issues: [{ path: [], message: BRIDGE_TEXTS.malformedRequestIssue }],
      }),
  });
  const server = createServer(listener);
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
  (backend as Partial<Pick<LocalBackend, "excludeFromEgress">>).excludeFromEgress?.({ host, port });

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
