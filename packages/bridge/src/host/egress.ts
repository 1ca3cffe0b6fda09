/**
 * The egress proxy of one sandbox: an HTTP forward proxy (CONNECT tunnels, and plain HTTP with
 * absolute-URI requests) on a unix socket that only that sandbox has (bind-mounted into it). For
 * each connection it checks the destination against the call's policy, resolves the name itself,
 * checks every address it got, and connects to the address it checked (so no second lookup can
 * answer differently). What may be reached is decided in egress-policy.ts; this module wires
 * that decision to sockets and name resolution. For a call with secrets it also terminates TLS to
 * the secrets' hosts with the sandbox's CA (sandbox-ca.ts), puts the values into request headers
 * (secret-headers.ts) and sends each request over a verified TLS connection upstream, kept open
 * between requests (pooled per destination, closed with the proxy).
 */
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  STATUS_CODES,
} from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { connect, isIP, type Socket } from "node:net";
import { networkInterfaces } from "node:os";
import type { Duplex } from "node:stream";
import { rootCertificates, TLSSocket } from "node:tls";
import type { NetworkPolicy } from "@remote-task/protocol";
import type { ParsedHostPattern } from "../network.js";
import { applySecrets, hideSecrets, secretAllowed } from "../secret-headers.js";
import type { CallSecret } from "../secrets.js";
import {
  chooseAddress,
  type EgressRules,
  type EgressVerdict,
  type Endpoint,
  egressRules,
  screenDestination,
  tooManyLookups,
  unresolved,
} from "./egress-policy.js";
import { createNameResolver, type NameResolverOptions, TooManyLookupsError } from "./resolver.js";
import { createSandboxCa, type SandboxCa } from "./sandbox-ca.js";

/** What the deployer sets for the egress proxy of the local and docker backends. */
export interface EgressOptions {
  /**
   * Host patterns (as in an allowlist: `name`, `*.name`, an IP address, `[IPv6]`, with an
   * optional `:port`) that may be reached at non-public addresses, under `open` or when an
   * allowlist lets the call reach them. Empty by default: no private, loopback or link-local
   * destination.
   */
  allowPrivate?: readonly string[] | undefined;
  /**
   * Certificate authorities (PEM) the proxy trusts for upstream TLS on intercepted (secret)
   * hosts, besides Node's bundled roots: for a test server or a private CA. Default: none.
   */
  upstreamCa?: string | undefined;
}

export interface EgressProxyOptions {
  socketPath: string;
  /** The call's policy: `open` or an allowlist. */
  policy: Exclude<NetworkPolicy, "none">;
  /** The allowlist is the caller's own (see ExecSpec.callersAllowlist). */
  callersAllowlist?: boolean | undefined;
  allowPrivate: readonly ParsedHostPattern[];
  /** Where the bridge itself listens, looked up on every connection. */
  protectedEndpoints: () => readonly Endpoint[];
  /** What one sandbox may make the proxy hold (default {@link DEFAULT_EGRESS_LIMITS}). */
  limits?: Partial<EgressLimits> | undefined;
  /** Name resolution (servers, per-query timeout, lookups at once, hosts file). */
  resolver?: NameResolverOptions | undefined;
  /**
   * The call's secrets: put into request headers to their hosts (secret-headers.ts); a request
   * carrying a placeholder elsewhere is refused.
   */
  secrets?: readonly CallSecret[] | undefined;
  /**
   * With secrets: where to write a CA bundle for the sandbox to trust (Node's bundled roots and
   * the sandbox's CA), removed when the proxy closes. Without it the backend places
   * {@link EgressProxy.caCertificate} itself.
   */
  caBundlePath?: string | undefined;
  /** See {@link EgressOptions.upstreamCa}. */
  upstreamCa?: string | undefined;
}

/** What one sandbox may make the bridge hold through its proxy. */
export interface EgressLimits {
  /**
   * Connections to the proxy at once (tunnels, requests, connections still sending headers);
   * more are closed as they arrive. Each holds at most one connection to a destination (a
   * connection's pipelined requests go one at a time, and at most {@link MAX_PIPELINED} wait
   * behind the one in flight, or it is closed) and about 64 KiB of buffered data each way
   * (streams are piped with backpressure). Connections to destinations are capped at the same
   * number (a 503 beyond it), so the proxy holds at most twice this many sockets, plus its own.
   */
  maxConnections: number;
  /** A connection that has not sent its request head within this many ms is closed. */
  headersTimeoutMs: number;
  /** A tunnel or connection with no data either way for this many ms is closed. */
  idleTimeoutMs: number;
}

export const DEFAULT_EGRESS_LIMITS: Readonly<EgressLimits> = Object.freeze({
  maxConnections: 64,
  headersTimeoutMs: 10_000,
  idleTimeoutMs: 300_000,
});

export interface EgressProxy {
  /** Connections refused by the policy so far. */
  readonly refused: number;
  /**
   * With secrets: the certificate (PEM) of the sandbox's CA, made when the proxy started, which
   * signs the certificates the proxy presents for the secrets' hosts; its key never leaves the
   * proxy and dies with it. The sandbox must trust it for HTTPS to those hosts.
   */
  readonly caCertificate: string | undefined;
  /** Closes the socket and every connection through it. */
  close(): Promise<void>;
}

/**
 * Requests one connection to the proxy may send ahead (HTTP pipelining) while one is in flight;
 * a connection sending more is closed. Each waits for the one before it to be answered.
 */
const MAX_PIPELINED = 8;

/** How long a connection to a destination may take to open. */
const CONNECT_TIMEOUT_MS = 15_000;
/** Idle TLS connections to a secret's host kept per destination, and how long (ms). */
const MAX_IDLE_UPSTREAMS = 4;
const IDLE_UPSTREAM_MS = 5_000;
/** Headers that concern one hop only (RFC 9110 7.6.1), never forwarded. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/** This machine's interface addresses, read on every decision (interfaces come and go). */
function interfaceAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) =>
    (list ?? []).map((info) => info.address),
  );
}

/** One proxy's state: its limits, its resolver, the sockets it holds, what it refused. */
interface ProxyState {
  readonly options: EgressProxyOptions;
  readonly limits: EgressLimits;
  readonly names: ReturnType<typeof createNameResolver>;
  /** Every socket the proxy holds, closed with it. */
  readonly sockets: Set<Duplex>;
  /** Connections to destinations open now (at most `limits.maxConnections`). */
  upstreams: number;
  refused: number;
  /** The sandbox's CA, when it has secrets. */
  readonly ca: SandboxCa | undefined;
  /** Serves the requests of intercepted (TLS-terminated) connections. */
  readonly inner: Server;
  /**
   * Keeps the proxy's TLS connections to the secrets' hosts open between requests (each request
   * still checked and rewritten on its own), so a client's kept-alive connection does not cost a
   * new upstream handshake per request. Pooled by checked address, port and server name.
   */
  readonly tlsAgent: HttpsAgent | undefined;
  /** Upstream sockets already tracked and counted (a pooled one serves many requests). */
  readonly upstreamSockets: WeakSet<Socket>;
  /** The destination of each intercepted connection. */
  readonly intercepted: WeakMap<Duplex, Destination>;
}

/** Where an intercepted connection's requests go: the CONNECT target and its checked address. */
interface Destination {
  host: string;
  port: number;
  address: string;
}

function track(state: ProxyState, socket: Duplex): void {
  state.sockets.add(socket);
  socket.once("close", () => state.sockets.delete(socket));
}

/** A socket with no data either way for the idle limit is closed (its peer with it). */
function idleCloses(state: ProxyState, socket: Socket): void {
  socket.setTimeout(state.limits.idleTimeoutMs, () => socket.destroy());
}

/** Counts `upstream` as a connection to a destination until it closes. */
function countUpstream(state: ProxyState, upstream: Socket): void {
  state.upstreams++;
  upstream.once("close", () => state.upstreams--);
}

/** Why no more connections to destinations may open, or undefined while they may. */
function upstreamsFull(state: ProxyState): string | undefined {
  const { maxConnections } = state.limits;
  return state.upstreams >= maxConnections
    ? `remote-task egress proxy: this sandbox already has ${maxConnections} connections open through the proxy; close some first.`
    : undefined;
}

/** Whether `host` port `port` may be reached, and at which checked address. */
async function decide(state: ProxyState, host: string, port: number): Promise<EgressVerdict> {
  const { options } = state;
  const rules = egressRules(
    options.policy,
    options.allowPrivate,
    options.protectedEndpoints(),
    interfaceAddresses(),
    options.callersAllowlist === true,
  );
  const verdict =
    screenDestination(host, port, rules) ?? (await resolveAndChoose(state, host, port, rules));
  if (!verdict.ok && verdict.status === 403) state.refused++;
  return verdict;
}

async function resolveAndChoose(
  state: ProxyState,
  host: string,
  port: number,
  rules: EgressRules,
): Promise<EgressVerdict> {
  if (isIP(host) !== 0) return chooseAddress(host, port, [host], rules);
  try {
    return chooseAddress(host, port, await state.names.resolve(host), rules);
  } catch (error) {
    if (TooManyLookupsError.isInstance(error)) return tooManyLookups(host, error.maxPending);
    return unresolved(host, (error as NodeJS.ErrnoException).code ?? (error as Error).message);
  }
}

/** Answers on a raw socket (a CONNECT request) and closes it. */
function answerRaw(socket: Duplex, status: number, reason: string): void {
  const body = `${reason}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function answer(res: ServerResponse, status: number, reason: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", connection: "close" });
  res.end(`${reason}\n`);
}

/** Opens a TCP connection to the address that was checked (a tunnel's far end). */
function open(
  state: ProxyState,
  address: string,
  port: number,
  onOpen: (upstream: Socket) => void,
  onFail: (message: string, status?: number) => void,
): void {
  const full = upstreamsFull(state);
  if (full !== undefined) {
    onFail(full, 503);
    return;
  }
  const upstream = connect({ host: address, port, allowHalfOpen: true });
  track(state, upstream);
  countUpstream(state, upstream);
  upstream.setTimeout(CONNECT_TIMEOUT_MS, () =>
    upstream.destroy(new Error(`no connection within ${CONNECT_TIMEOUT_MS / 1000} s`)),
  );
  const fail = (error: NodeJS.ErrnoException) =>
    onFail(
      `remote-task egress proxy: cannot connect to ${address} port ${port}: ${error.code ?? error.message}.`,
    );
  upstream.once("error", fail);
  upstream.once("connect", () => {
    upstream.off("error", fail);
    idleCloses(state, upstream);
    onOpen(upstream);
  });
}

/** A CONNECT request: a tunnel to the checked address, or a refusal. */
async function onConnect(
  state: ProxyState,
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
): Promise<void> {
  track(state, client);
  idleCloses(state, client as Socket);
  client.on("error", () => client.destroy());
  // `host:port` or `[IPv6]:port` (not through URL, which drops a port that is the default).
  const authority = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(req.url ?? "");
  if (authority === null) {
    return answerRaw(client, 400, `remote-task egress proxy: bad CONNECT target ${req.url}.`);
  }
  const host = (authority[1] ?? authority[2] ?? "").toLowerCase();
  const port = Number(authority[3]);
  const decision = await decide(state, host, port);
  if (!decision.ok) return answerRaw(client, decision.status, decision.reason);
  if (interceptable(state, host, port)) {
    return intercept(state, client, head, { host, port, address: decision.address });
  }
  open(
    state,
    decision.address,
    port,
    (upstream) => {
      if (client.destroyed) {
        upstream.destroy();
        return;
      }
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.on("error", () => client.destroy());
      client.on("error", () => upstream.destroy());
      client.once("close", () => upstream.destroy());
      upstream.once("close", () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    },
    (message, status) => answerRaw(client, status ?? 502, message),
  );
}

function forwardHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const kept: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers))
    if (!HOP_BY_HOP.has(name)) kept[name] = value;
  return kept;
}

/** A plain HTTP request (absolute URI): forwarded to the checked address, or refused. */
async function onRequest(
  state: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let url: URL | undefined;
  try {
    url = new URL(req.url ?? "");
  } catch {}
  if (url?.protocol !== "http:") {
    return answer(
      res,
      400,
      "remote-task egress proxy: send plain HTTP as an absolute-URI request (http://host/path) and HTTPS as CONNECT host:443.",
    );
  }
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || 80);
  const decision = await decide(state, host, port);
  if (!decision.ok) return answer(res, decision.status, decision.reason);
  forward(state, req, res, {
    host,
    port,
    address: decision.address,
    path: `${url.pathname}${url.search}`,
    authority: url.host,
    tls: false,
  });
}

/** A request to send on: to the checked address, for `host` (its TLS name when `tls`). */
interface Forwarded extends Destination {
  path: string;
  /** The Host header. */
  authority: string;
  tls: boolean;
}

/** Sends a request on to its destination (secrets put in) and its answer back. */
function forward(state: ProxyState, req: IncomingMessage, res: ServerResponse, to: Forwarded) {
  const { host, port } = to;
  const secrets = state.options.secrets ?? [];
  const withSecrets = applySecrets(
    forwardHeaders(req.headers),
    { host, port, tls: to.tls },
    secrets,
  );
  if (!withSecrets.ok) {
    state.refused++;
    return answer(res, withSecrets.status, withSecrets.reason);
  }
  const full = upstreamsFull(state);
  if (full !== undefined) return answer(res, 503, full);
  const options = {
    host: to.address,
    port,
    method: req.method,
    path: to.path,
    headers: { ...withSecrets.headers, host: to.authority },
    setHost: false,
    timeout: CONNECT_TIMEOUT_MS,
  };
  const upstream = to.tls
    ? httpsRequest({
        ...options,
        agent: state.tlsAgent,
        ...(isIP(host) === 0 ? { servername: host } : {}),
      })
    : httpRequest({ ...options, agent: false });
  upstream.once("socket", (socket: Socket) => {
    if (state.upstreamSockets.has(socket)) return;
    state.upstreamSockets.add(socket);
    track(state, socket);
    countUpstream(state, socket);
  });
  upstream.once("timeout", () => upstream.destroy(new Error("timed out")));
  upstream.once("error", (error: NodeJS.ErrnoException) =>
    answer(
      res,
      502,
      `remote-task egress proxy: ${to.authority} (${to.address}): ${error.code ?? error.message}${to.tls ? " (the upstream TLS connection failed: the proxy verifies the real server's certificate)" : ""}.`,
    ),
  );
  // A client that goes away takes its request to the destination with it.
  res.once("close", () => upstream.destroy());
  upstream.once("response", (response) => {
    res.writeHead(
      response.statusCode ?? 502,
      hideSecrets(forwardHeaders(response.headers), secrets),
    );
    response.pipe(res);
    response.once("error", () => res.destroy());
  });
  req.pipe(upstream);
}

/** Whether CONNECT to `host:port` is terminated here: the call has a secret for it (and a CA). */
function interceptable(state: ProxyState, host: string, port: number): boolean {
  return (
    state.ca !== undefined &&
    (state.options.secrets ?? []).some((secret) => secretAllowed(secret, host, port))
  );
}

/**
 * A CONNECT to a secret's host: answered here with a certificate for that host from the
 * sandbox's CA; its requests are then served by the inner server and forwarded over TLS to the
 * checked address, the real server verified as usual.
 */
function intercept(state: ProxyState, client: Duplex, head: Buffer, to: Destination) {
  const ca = state.ca;
  if (ca === undefined) return answerRaw(client, 500, "remote-task egress proxy: no CA.");
  client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
  if (head.length > 0) client.unshift(head);
  const tls = new TLSSocket(client as Socket, {
    isServer: true,
    ...ca.leaf(to.host),
    ALPNProtocols: ["http/1.1"],
  });
  track(state, tls);
  tls.on("error", () => client.destroy());
  tls.once("close", () => client.destroy());
  state.intercepted.set(tls, to);
  state.inner.emit("connection", tls);
}

function onInterceptedRequest(state: ProxyState, req: IncomingMessage, res: ServerResponse) {
  const to = state.intercepted.get(req.socket);
  if (to === undefined) return answer(res, 500, "remote-task egress proxy: unknown connection.");
  const path = req.url ?? "/";
  if (!path.startsWith("/")) {
    return answer(res, 400, `remote-task egress proxy: bad request target ${path}.`);
  }
  const name = to.host.includes(":") ? `[${to.host}]` : to.host;
  forward(state, req, res, {
    ...to,
    path,
    authority: to.port === 443 ? name : `${name}:${to.port}`,
    tls: true,
  });
}

function randomLabel(): string {
  return randomBytes(4).toString("hex");
}

/**
 * Takes a connection's requests one at a time, in order; a connection with more than
 * {@link MAX_PIPELINED} waiting behind the one in flight is closed.
 */
function pipelined(
  handle: (req: IncomingMessage, res: ServerResponse) => void,
): (req: IncomingMessage, res: ServerResponse) => void {
  /** Per connection: the end of its last request, and how many of its requests have not started. */
  const inFlight = new WeakMap<Socket, { done: Promise<void>; waiting: number }>();
  return (req, res) => {
    const socket = req.socket;
    const line = inFlight.get(socket) ?? { done: Promise.resolve(), waiting: 0 };
    if (line.waiting >= MAX_PIPELINED) {
      socket.destroy();
      return;
    }
    line.waiting++;
    const answered = new Promise<void>((resolve) => res.once("close", resolve));
    line.done = line.done.then(() => {
      line.waiting--;
      if (!res.destroyed) handle(req, res);
      return answered;
    });
    inFlight.set(socket, line);
  };
}

/**
 * Starts one sandbox's egress proxy: each connection's destination is resolved, then checked by
 * the egress policy (egress-policy.ts), and connected or refused within the proxy's limits.
 */
export async function startEgressProxy(options: EgressProxyOptions): Promise<EgressProxy> {
  const limits = { ...DEFAULT_EGRESS_LIMITS, ...options.limits };
  const serverOptions = {
    requestTimeout: 0,
    headersTimeout: limits.headersTimeoutMs,
    // How often the server looks for connections past their headers timeout.
    connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs),
    keepAliveTimeout: 5_000,
  };
  const inner = createServer(serverOptions);
  const ca = (options.secrets ?? []).length > 0 ? createSandboxCa(randomLabel()) : undefined;
  const tlsAgent =
    ca === undefined
      ? undefined
      : new HttpsAgent({
          keepAlive: true,
          maxFreeSockets: MAX_IDLE_UPSTREAMS,
          // An idle pooled connection is closed after this (a request in flight has its own).
          timeout: IDLE_UPSTREAM_MS,
          // The real server is verified as any client would (Node's roots, plus upstreamCa).
          ...(options.upstreamCa === undefined
            ? {}
            : { ca: [...rootCertificates, options.upstreamCa] }),
        });
  if (ca !== undefined && options.caBundlePath !== undefined) {
    writeFileSync(options.caBundlePath, [...rootCertificates, ca.certificatePem].join("\n"), {
      mode: 0o644,
    });
  }
  const state: ProxyState = {
    options,
    limits,
    names: createNameResolver(options.resolver),
    sockets: new Set(),
    upstreams: 0,
    refused: 0,
    ca,
    inner,
    intercepted: new WeakMap(),
    tlsAgent,
    upstreamSockets: new WeakSet(),
  };
  const server = createServer(serverOptions);
  // Beyond this the server closes each new connection as it arrives.
  server.maxConnections = limits.maxConnections;
  server.timeout = limits.idleTimeoutMs;
  server.on("connection", (socket: Socket) => track(state, socket));
  server.on("connect", (req: IncomingMessage, client: Duplex, head: Buffer) => {
    void onConnect(state, req, client, head);
  });
  server.on(
    "request",
    pipelined((req, res) => void onRequest(state, req, res)),
  );
  inner.on(
    "request",
    pipelined((req, res) => onInterceptedRequest(state, req, res)),
  );
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.socketPath, () => {
      server.off("error", reject);
      resolve();
    });
  });

  let closing: Promise<void> | undefined;
  return {
    get refused() {
      return state.refused;
    },
    caCertificate: ca?.certificatePem,
    close() {
      closing ??= new Promise<void>((resolve) => {
        state.names.cancel();
        inner.close();
        tlsAgent?.destroy();
        if (ca !== undefined && options.caBundlePath !== undefined) {
          rmSync(options.caBundlePath, { force: true });
        }
        server.close(() => resolve());
        for (const socket of state.sockets) socket.destroy();
      });
      return closing;
    },
  };
}
