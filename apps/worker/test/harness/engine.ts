/**
 * A fake Docker Engine API on a unix socket: what workerd's container client talks to when a
 * Durable Object uses `ctx.container` locally (Miniflare `containerEngine.localDocker`). Each app
 * container is a local bubblewrap process tree (container.ts) running a container server; each
 * `-proxy` sidecar is emulated in-process: workerd reaches the app container's ports through it
 * with HTTP CONNECT (`X-Dst-Addr`), and calls `GET /ca` and `PUT /egress` on it. A container
 * runs the create request's entrypoint and command when it names them (a Durable Object's
 * `ctx.container.start({ entrypoint })` arrives as `Cmd`), else the image's server; `ctx.container.exec` runs
 * commands in it through Docker's exec endpoints (exec.ts), recorded in `ContainerRecord.execs`;
 * the files workerd copies in (`PUT /containers/{id}/archive`, the interception's CA) are recorded
 * in `files`, not written. Outbound interception (`interceptOutboundHttp` and the like: egress
 * settings with `dns.allowHostnames`) is emulated for plain HTTP through a proxy: commands get
 * `http_proxy` (`EGRESS_PROXY`, the container's relay), and each request is sent on to workerd's
 * egress listener as the real sidecar does (`CONNECT <ip>:80`, then the request), so it reaches
 * the Durable Object's binding; recorded in `outbound`. Only clients that honour `http_proxy` are
 * intercepted (the real sidecar catches all traffic), and HTTPS is not (answered 502).
 *
 * Every create, start, kill, stop and delete is recorded with the Durable Object the container
 * served and the HTTP requests it received, and faults can be injected per container: a slow
 * (cold) start, a server that never listens, a refused create (capacity), a kill mid-command.
 * A request the engine does not know answers 500 and is kept in `problems`, so a workerd upgrade
 * that changes the wire shows up as a failure. Docker's restart policy is not emulated: a
 * container that dies stays dead (as on Cloudflare).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { type AddressInfo, createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { Container, type ContainerImage } from "./container.ts";
import { type ExecConfig, type ExecRecord, ExecSession } from "./exec.ts";

/** Faults for the next containers created (read when each is created). */
export interface Faults {
  /** Delay between `start` and the container's processes starting (a cold start). */
  coldStartMs?: number;
  /** The container's processes start once this settles (a cold start the test ends). */
  startGate?: Promise<void>;
  /**
   * Every `every`-th container the engine creates (counting all of them) starts after `ms`
   * instead of `coldStartMs`: a cold start with a long tail.
   */
  slowStart?: { every: number; ms: number };
  /** The server never starts: nothing listens on the port. */
  neverListens?: boolean;
  /** `containers/create` is refused: the container can never be created (a start failure). */
  refuseCreate?: boolean;
  /**
   * No instance can be placed: the container is accepted but never runs, and waiting on it fails
   * with the platform's capacity message, which is how @cloudflare/containers learns of it; an
   * exec in it fails with the same message (how `ctx.container.exec` learns of it).
   */
  noInstance?: boolean;
}

/** The platform's words when no container instance can be placed. */
const CAPACITY_MESSAGE =
  "there is no container instance that can be provided to this durable object";

export type LifecycleEvent =
  | "create"
  | "refused"
  | "start"
  | "running"
  | "kill"
  | "stop"
  | "exit"
  | "delete";

/**
 * Still holding resources: not deleted and not exited. (A container that died, or that no
 * instance was ever placed for, is gone on Cloudflare even when Docker keeps its record.)
 */
export function isLive(record: ContainerRecord): boolean {
  return !record.deleted && record.exitCode === undefined;
}

/** The host name a container's processes see (Docker's: the first 12 digits of its id). */
export function hostnameOf(record: ContainerRecord): string {
  return record.id.slice(0, 12);
}

export interface ContainerRecord {
  /** Docker id. */
  id: string;
  /** Docker name, as workerd chose it. */
  name: string;
  /** The Durable Object id (hex) the container serves, read from its name. */
  durableObjectId: string | undefined;
  image: string;
  env: readonly string[];
  events: Array<{ event: LifecycleEvent; at: number; detail?: string }>;
  /** Request lines (`POST /api/execute/stream HTTP/1.1`) received through the sidecar, and when. */
  requests: Array<{ line: string; at: number }>;
  /** Set while the container runs. */
  exitCode?: number;
  deleted: boolean;
  /** The container's stdout and stderr (last 64 KiB). */
  log: string;
  /** The container's /workspace on the host (removed with the container). */
  workspace?: string;
  /**
   * The egress settings workerd sent to the container's `-proxy` sidecar (`PUT /egress`), in
   * order: `internet.enabled` is the start's `enableInternet`, which the real sidecar enforces.
   */
  egress: EgressConfig[];
  /** The commands run in it with Docker's exec (`ctx.container.exec`, and workerd's `kill()`). */
  execs: ExecRecord[];
  /**
   * Files workerd copied into it (`PUT /containers/{id}/archive`: the interception's CA
   * certificate), recorded but not written (its /etc is the host's, read-only).
   */
  files: Array<{ path: string; bytes: number }>;
  /** Outbound HTTP requests its commands sent through the emulated interception, in order. */
  outbound: Array<{ method: string; url: string; status: number }>;
}

/** What workerd's container client sends as a sidecar's egress settings (`PUT /egress`). */
export interface EgressConfig {
  port?: number;
  dns?: { allowHostnames?: string[] };
  internet?: { enabled?: boolean };
}

interface AppContainer {
  record: ContainerRecord;
  faults: Faults;
  sidecar: string;
  status: "created" | "running" | "exited";
  /** The create request's entrypoint and command, when it named them. */
  command: readonly string[] | undefined;
  process?: Container;
  /** Resolves once its process runs, or once it never will (`process` unset then). */
  launched: Promise<void>;
  markLaunched: () => void;
  /** Resolves when the container has exited (or was never started and was removed). */
  exited: Promise<void>;
  markExited: () => void;
  removed: Promise<void>;
  markRemoved: () => void;
  /** Set once a delete has begun. */
  removing?: Promise<void>;
}

interface Sidecar {
  name: string;
  record: ContainerRecord;
  server?: Server | undefined;
  port?: number;
  /** Shared with the app container's record (`ContainerRecord.egress`). */
  egress: EgressConfig[];
  /**
   * The CONNECT tunnels open through it: an upgraded socket is no longer the server's, so
   * `closeAllConnections()` leaves it open and `close()` would wait for it forever.
   */
  tunnels?: Set<Socket> | undefined;
}

const SIDECAR_INGRESS_PORT = 39001;
/** The outbound proxy commands get while interception is on (the relay's port: relay.ts). */
const EGRESS_PROXY = "http://127.0.0.1:3128";
/** The end of an HTTP message head. */
const HEAD_END = "\r\n\r\n";
/**
 * An HTTP/1.1 request line at the start of a chunk or after the blank line that ends a message
 * (bodies are JSON, where a raw CR LF cannot appear).
 */
const REQUEST_LINE =
  /(?:^|\r\n\r\n)((?:GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) \S+ HTTP\/1\.[01])\r\n/g;
const FAKE_CA =
  "-----BEGIN CERTIFICATE-----\nremote-task harness: no TLS interception\n-----END CERTIFICATE-----\n";

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** An HTTP message head read from `socket` (up to 64 KiB) and the bytes after it. */
async function readHead(socket: Socket): Promise<{ head: string; rest: Buffer }> {
  let received = Buffer.alloc(0);
  for (;;) {
    const end = received.indexOf(HEAD_END);
    if (end !== -1) {
      socket.pause();
      return {
        head: received.subarray(0, end).toString("latin1"),
        rest: received.subarray(end + HEAD_END.length),
      };
    }
    if (received.length > 65_536) throw new Error("an HTTP head larger than 64 KiB");
    const chunk = await new Promise<Buffer | null>((resolve) => {
      const onData = (data: Buffer) => {
        socket.off("end", onEnd);
        resolve(data);
      };
      const onEnd = () => {
        socket.off("data", onData);
        resolve(null);
      };
      socket.once("data", onData);
      socket.once("end", onEnd);
    });
    if (chunk === null) throw new Error("the connection ended before its HTTP head");
    received = Buffer.concat([received, chunk]);
  }
}

/** The next `length` bytes of `stream` (fewer if it ends first). */
async function readExactly(stream: Readable, length: number): Promise<Buffer> {
  if (length === 0) return Buffer.alloc(0);
  for (;;) {
    const chunk = stream.read(length) as Buffer | null;
    if (chunk !== null) return chunk;
    if (stream.readableEnded) return Buffer.alloc(0);
    await new Promise((resolve) => {
      stream.once("readable", resolve);
      stream.once("end", resolve);
    });
  }
}

function send(response: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    response.writeHead(status, { "content-length": "0" });
    response.end();
    return;
  }
  const text = typeof body === "string" ? body : JSON.stringify(body);
  response.writeHead(status, {
    "content-type": typeof body === "string" ? "text/plain" : "application/json",
    "content-length": Buffer.byteLength(text),
  });
  response.end(text);
}

async function readRawBody(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The files of a tar archive (their paths under the archive's root) and their sizes. */
function tarEntries(tar: Buffer): Array<{ name: string; bytes: number }> {
  const entries: Array<{ name: string; bytes: number }> = [];
  for (let at = 0; at + 512 <= tar.length; ) {
    const header = tar.subarray(at, at + 512);
    const name = header.subarray(0, 100).toString("utf8").replace(/\0.*$/s, "");
    if (name === "") break;
    const prefix = header.subarray(345, 500).toString("utf8").replace(/\0.*$/s, "");
    const bytes = Number.parseInt(header.subarray(124, 136).toString("latin1").trim() || "0", 8);
    // Type "0" or NUL: a regular file.
    if (header[156] === 0x30 || header[156] === 0) {
      entries.push({ name: prefix === "" ? name : `${prefix}/${name}`, bytes });
    }
    at += 512 + Math.ceil(bytes / 512) * 512;
  }
  return entries;
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export interface EngineOptions {
  /** The image every app container runs. */
  image: ContainerImage;
  /** Receives each line a container prints (default: kept in the record only). */
  onLog?: (record: ContainerRecord, line: string) => void;
}

export class FakeDockerEngine {
  readonly socketPath: string;
  readonly #dir: string;
  readonly #server: Server;
  readonly #options: EngineOptions;
  readonly #containers = new Map<string, AppContainer>();
  readonly #sidecars = new Map<string, Sidecar>();
  readonly #egress = new Map<string, EgressConfig[]>();
  readonly #execs = new Map<string, ExecSession>();
  /** Hijacked exec streams: no longer the HTTP server's, closed by `close()` itself. */
  readonly #hijacked = new Set<Socket>();
  /** Every app container ever created, in order (also refused ones). */
  readonly records: ContainerRecord[] = [];
  /** Requests the engine or a container server did not know; a test fails if any. */
  readonly problems: string[] = [];
  /** Faults applied to containers created from now on. */
  faults: Faults = {};
  /** Containers created so far (for `slowStart`). */
  #created = 0;
  /** Faults for containers of one Durable Object id, taking precedence over `faults`. */
  readonly faultsFor = new Map<string, Faults>();

  private constructor(dir: string, options: EngineOptions) {
    this.#dir = dir;
    this.#options = options;
    this.socketPath = join(dir, "docker.sock");
    this.#server = createServer((request, response) => {
      this.#route(request, response).catch((error: unknown) => {
        this.problems.push(`engine error on ${request.method} ${request.url}: ${String(error)}`);
        if (!response.headersSent) send(response, 500, { message: String(error) });
      });
    });
    this.#server.on("upgrade", (request: IncomingMessage, socket: Socket, head: Buffer) => {
      this.#upgrade(request, socket, head).catch((error: unknown) => {
        this.problems.push(`engine error on ${request.method} ${request.url}: ${String(error)}`);
        socket.destroy();
      });
    });
  }

  static async start(options: EngineOptions): Promise<FakeDockerEngine> {
    const dir = await mkdtemp(join(tmpdir(), "rt-harness-engine-"));
    const engine = new FakeDockerEngine(dir, options);
    await new Promise<void>((resolve) => engine.#server.listen(engine.socketPath, resolve));
    return engine;
  }

  /** Containers neither deleted nor exited: what a call may have left behind. */
  get live(): ContainerRecord[] {
    return this.records.filter(isLive);
  }

  /** SIGKILLs the running app container of `record` (it dies mid-command). */
  kill(record: ContainerRecord): void {
    const container = this.#containers.get(record.name);
    container?.process?.signal("SIGKILL");
  }

  /** Kills every container and sidecar, removes their directories and closes the socket. */
  async close(): Promise<void> {
    await Promise.all([...this.#containers.values()].map((c) => this.#remove(c)));
    for (const sidecar of this.#sidecars.values()) await this.#closeSidecar(sidecar);
    for (const socket of this.#hijacked) socket.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await rm(this.#dir, { recursive: true, force: true });
  }

  #note(record: ContainerRecord, event: LifecycleEvent, detail?: string): void {
    record.events.push({ event, at: Date.now(), ...(detail === undefined ? {} : { detail }) });
  }

  async #route(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "http://engine");
    const path = url.pathname.replace(/^\/v\d+\.\d+/, "");
    const method = request.method ?? "GET";
    const raw = await readRawBody(request);
    const body = raw.toString("utf8");
    if (method === "GET" && path === "/_ping") return send(response, 200, "OK");
    if (method === "GET" && path === "/info") {
      return send(response, 200, {
        OSType: "linux",
        SecurityOptions: [],
        ServerVersion: "harness",
      });
    }
    if (method === "GET" && path === "/networks/bridge") {
      return send(response, 200, {
        Name: "bridge",
        Id: "harness-bridge",
        IPAM: { Driver: "default", Config: [{ Subnet: "127.0.0.0/8", Gateway: "127.0.0.1" }] },
      });
    }
    if (method === "GET" && path === "/volumes") {
      return send(response, 200, { Volumes: [], Warnings: [] });
    }
    if (method === "POST" && path === "/containers/create") {
      return this.#create(url.searchParams.get("name") ?? "", body, response);
    }
    const exec = /^\/exec\/([0-9a-f]+)\/(json|start)$/.exec(path);
    const session = exec === null ? undefined : this.#execs.get(exec[1] ?? "");
    if (exec !== null && session === undefined) {
      return send(response, 404, { message: `No such exec instance: ${exec[1]}` });
    }
    if (session !== undefined && method === "GET" && exec?.[2] === "json") {
      return send(response, 200, session.inspect());
    }
    if (session !== undefined && method === "POST" && exec?.[2] === "start") {
      const { Detach } = JSON.parse(body || "{}") as { Detach?: boolean };
      if (Detach === true && !session.started) {
        void session.start(undefined);
        return send(response, 200);
      }
    }
    const match = /^\/containers\/([^/]+)(\/[a-z]+)?$/.exec(path);
    if (match !== null) {
      const name = decodeURIComponent(match[1] ?? "");
      const action = match[2] ?? "";
      const sidecar = this.#sidecars.get(name);
      if (sidecar !== undefined) return this.#sidecarRoute(sidecar, method, action, response);
      const container = this.#containers.get(name);
      if (container !== undefined && !container.record.deleted) {
        return this.#containerRoute(container, method, action, url, response, body, raw);
      }
      if (method === "DELETE" || action === "/json" || action === "/wait") {
        return send(response, 404, { message: `No such container: ${name}` });
      }
    }
    this.problems.push(`unknown Docker API request: ${method} ${url.pathname}${url.search}`);
    send(response, 500, { message: `harness engine: unknown request ${method} ${path}` });
  }

  #newRecord(name: string, image: string, env: readonly string[]): ContainerRecord {
    const doId = /([0-9a-f]{64})(?:-proxy)?$/.exec(name)?.[1];
    return {
      id: randomBytes(32).toString("hex"),
      name,
      durableObjectId: doId,
      image,
      env,
      events: [],
      requests: [],
      deleted: false,
      log: "",
      egress: [],
      execs: [],
      files: [],
      outbound: [],
    };
  }

  /**
   * The egress settings of the app container `name`, one list shared by its record and its
   * sidecar, whichever workerd creates first.
   */
  #egressOf(name: string): EgressConfig[] {
    let egress = this.#egress.get(name);
    if (egress === undefined) {
      egress = [];
      this.#egress.set(name, egress);
    }
    return egress;
  }

  #create(name: string, body: string, response: ServerResponse) {
    const config = JSON.parse(body) as {
      Image?: string;
      Env?: string[];
      Entrypoint?: string[] | string | null;
      Cmd?: string[] | string | null;
      HostConfig?: { NetworkMode?: string };
    };
    const decoded = decodeURIComponent(name);
    if (decoded.endsWith("-proxy")) {
      if (this.#sidecars.has(decoded)) return send(response, 409, { message: "Conflict" });
      const record = this.#newRecord(decoded, config.Image ?? "", config.Env ?? []);
      this.#note(record, "create");
      const egress = this.#egressOf(decoded.replace(/-proxy$/, ""));
      this.#sidecars.set(decoded, { name: decoded, record, egress });
      return send(response, 201, { Id: record.id, Warnings: [] });
    }
    const existing = this.#containers.get(decoded);
    if (existing !== undefined && !existing.record.deleted) {
      return send(response, 409, { message: `Conflict: name ${decoded} is in use` });
    }
    const record = this.#newRecord(decoded, config.Image ?? "", config.Env ?? []);
    // Shared with its sidecar, whichever workerd creates first (both live as long as the name).
    record.egress = this.#egressOf(decoded);
    this.records.push(record);
    const faults = {
      ...this.faults,
      ...(record.durableObjectId === undefined ? {} : this.faultsFor.get(record.durableObjectId)),
    };
    this.#created++;
    if (faults.slowStart !== undefined && this.#created % faults.slowStart.every === 0) {
      faults.coldStartMs = faults.slowStart.ms;
    }
    if (faults.refuseCreate) {
      this.#note(record, "refused");
      record.deleted = true;
      return send(response, 500, { message: "harness engine: create refused (fault)" });
    }
    this.#note(record, "create");
    const exited = deferred();
    const removed = deferred();
    const launched = deferred();
    const words = (value: string[] | string | null | undefined) =>
      value === null || value === undefined ? [] : typeof value === "string" ? [value] : value;
    // workerd sends `start({ entrypoint })` as `Cmd`; the harness's images have no entrypoint.
    const command = [...words(config.Entrypoint), ...words(config.Cmd)];
    const sidecar = decodeURIComponent(
      (config.HostConfig?.NetworkMode ?? "").replace(/^container:/, ""),
    );
    this.#containers.set(decoded, {
      record,
      faults,
      sidecar,
      status: "created",
      command: command.length > 0 ? command : undefined,
      launched: launched.promise,
      markLaunched: launched.resolve,
      exited: exited.promise,
      markExited: exited.resolve,
      removed: removed.promise,
      markRemoved: removed.resolve,
    });
    send(response, 201, { Id: record.id, Warnings: [] });
  }

  async #containerRoute(
    container: AppContainer,
    method: string,
    action: string,
    url: URL,
    response: ServerResponse,
    body: string,
    raw: Buffer,
  ): Promise<void> {
    const { record } = container;
    if (method === "GET" && action === "/json") {
      const running = container.status === "running";
      return send(response, 200, {
        Id: record.id,
        Name: `/${record.name}`,
        State: {
          Status: container.status,
          Running: running,
          ExitCode: record.exitCode ?? 0,
          Pid: container.process?.pid ?? 0,
        },
        Config: { Image: record.image, Env: record.env },
        NetworkSettings: { Ports: {} },
      });
    }
    if (method === "POST" && action === "/start") {
      if (container.status === "running") return send(response, 304);
      this.#start(container);
      return send(response, 204);
    }
    if (method === "POST" && action === "/wait") {
      if (container.faults.noInstance && url.searchParams.get("condition") !== "removed") {
        return send(response, 500, { message: CAPACITY_MESSAGE });
      }
      if (url.searchParams.get("condition") === "removed") await container.removed;
      else await container.exited;
      return send(response, 200, { StatusCode: record.exitCode ?? 0, Error: null });
    }
    if (method === "POST" && (action === "/kill" || action === "/stop")) {
      const signal = (
        url.searchParams.get("signal") ?? (action === "/stop" ? "SIGTERM" : "SIGKILL")
      )
        .toUpperCase()
        .replace(/^(?!SIG)/, "SIG") as NodeJS.Signals;
      this.#note(record, action === "/kill" ? "kill" : "stop", signal);
      if (container.status !== "running") return send(response, 409, { message: "not running" });
      container.process?.signal(signal);
      if (action === "/stop") await container.exited;
      return send(response, 204);
    }
    if (method === "DELETE" && action === "") {
      await this.#remove(container);
      return send(response, 204);
    }
    if (method === "POST" && action === "/exec") return this.#createExec(container, body, response);
    if (method === "PUT" && action === "/archive") {
      // Kept, not written: the container's system directories are the host's, read-only.
      const at = url.searchParams.get("path") ?? "/";
      for (const entry of tarEntries(raw)) {
        const file = `${at.replace(/\/$/, "")}/${entry.name.replace(/^\.\//, "")}`;
        record.files.push({ path: file, bytes: entry.bytes });
      }
      return send(response, 200);
    }
    this.problems.push(`unknown container request: ${method} ${action} on ${record.name}`);
    send(response, 500, { message: "harness engine: unknown container request" });
  }

  /** `POST /containers/{id}/exec`: a session to start (exec.ts); Docker refuses a stopped one. */
  #createExec(container: AppContainer, body: string, response: ServerResponse): void {
    if (container.faults.noInstance) {
      // What a Durable Object sees wherever it looks: the platform's capacity message.
      send(response, 500, { message: CAPACITY_MESSAGE });
      return;
    }
    if (container.status !== "running") {
      send(response, 409, { message: `container ${container.record.name} is not running` });
      return;
    }
    const intercepted = (container.record.egress.at(-1)?.dns?.allowHostnames?.length ?? 0) > 0;
    const proxy = intercepted ? [`http_proxy=${EGRESS_PROXY}`, `HTTP_PROXY=${EGRESS_PROXY}`] : [];
    const session = new ExecSession(
      container.record.id,
      JSON.parse(body) as ExecConfig,
      async () => {
        await container.launched;
        return container.status === "running" ? container.process : undefined;
      },
      proxy,
    );
    this.#execs.set(session.record.id, session);
    container.record.execs.push(session.record);
    send(response, 201, { Id: session.record.id });
  }

  /** A hijacked request: only an attached `POST /exec/{id}/start` is one. */
  async #upgrade(request: IncomingMessage, client: Socket, head: Buffer): Promise<void> {
    const path = new URL(request.url ?? "/", "http://engine").pathname.replace(/^\/v\d+\.\d+/, "");
    const id = /^\/exec\/([0-9a-f]+)\/start$/.exec(path)?.[1];
    const session = id === undefined ? undefined : this.#execs.get(id);
    if (request.method !== "POST" || session === undefined || session.started) {
      this.problems.push(`unknown hijacked request: ${request.method} ${request.url}`);
      client.end("HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    this.#hijacked.add(client);
    client.once("close", () => this.#hijacked.delete(client));
    client.on("error", () => {});
    // Everything the client sends from here, kept (with its end) until the command reads it.
    const input = new PassThrough();
    input.write(head);
    client.pipe(input);
    const length = Number(request.headers["content-length"] ?? 0);
    const body = await readExactly(input, length);
    const { Detach } = JSON.parse(body.toString("utf8") || "{}") as { Detach?: boolean };
    if (Detach === true) {
      client.end("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
      await session.start(undefined);
      return;
    }
    client.write(
      "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n" +
        "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
    );
    await session.start(client, input);
  }

  /**
   * One connection to the emulated interception's proxy (see the overview): its request goes to
   * workerd's egress listener as the real sidecar sends it, and the answer back.
   */
  async #outbound(record: ContainerRecord, client: Socket): Promise<void> {
    const refuse = (status: string, why: string): void => {
      client.end(
        `HTTP/1.1 ${status}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${why}\n`,
      );
    };
    const { head, rest } = await readHead(client);
    const [method = "", target = "", version = "HTTP/1.1"] = (head.split("\r\n")[0] ?? "").split(
      " ",
    );
    const egress = record.egress.at(-1);
    if (method === "CONNECT")
      return refuse("502 Bad Gateway", "harness: HTTPS interception is not emulated");
    if (egress?.port === undefined || (egress.dns?.allowHostnames?.length ?? 0) === 0) {
      return refuse(
        "502 Bad Gateway",
        "harness: no outbound access (internet off, no interception)",
      );
    }
    let url: URL;
    try {
      url = new URL(target);
    } catch {
      return refuse("400 Bad Request", "harness: the proxy takes absolute http:// URLs");
    }
    const upstream = createConnection({ host: "127.0.0.1", port: egress.port });
    upstream.on("error", () => client.destroy());
    upstream.write(
      `CONNECT 127.0.0.1:${url.port || 80} HTTP/1.1\r\nHost: 127.0.0.1:${url.port || 80}${HEAD_END}`,
    );
    const answer = await readHead(upstream);
    if (!/^HTTP\/1\.[01] 200/.test(answer.head)) {
      upstream.destroy();
      record.outbound.push({ method, url: url.href, status: 502 });
      return refuse(
        "502 Bad Gateway",
        `harness: workerd refused the tunnel: ${answer.head.split("\r\n")[0]}`,
      );
    }
    const headers = head
      .split("\r\n")
      .slice(1)
      .filter((line) => !/^(proxy-connection|connection|host):/i.test(line));
    upstream.write(
      [
        `${method} ${url.pathname}${url.search} ${version}`,
        `Host: ${url.host}`,
        "Connection: close",
        ...headers,
      ].join("\r\n") + HEAD_END,
    );
    if (rest.length > 0) upstream.write(rest);
    const entry = { method, url: url.href, status: 0 };
    record.outbound.push(entry);
    upstream.once("data", (chunk: Buffer) => {
      entry.status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(chunk.toString("latin1"))?.[1] ?? 0);
    });
    if (answer.rest.length > 0) client.write(answer.rest);
    client.pipe(upstream);
    upstream.pipe(client);
    client.once("close", () => upstream.destroy());
  }

  #start(container: AppContainer): void {
    const { record, faults } = container;
    this.#note(record, "start");
    if (faults.noInstance) {
      record.exitCode = 137;
      container.status = "exited";
      container.markExited();
      container.markLaunched();
      return;
    }
    container.status = "running";
    const launch = async () => {
      if (container.record.deleted || container.status !== "running") {
        container.markLaunched();
        return;
      }
      const process = await Container.start({
        image: this.#options.image,
        command: container.command,
        env: record.env,
        onEgress: (socket) => {
          this.#outbound(record, socket).catch((error: unknown) => {
            this.problems.push(`outbound proxy of ${record.name}: ${String(error)}`);
            socket.destroy();
          });
        },
        hostname: hostnameOf(record),
        ...(faults.neverListens ? { neverListens: true } : {}),
        onLog: (line) => {
          if (line.includes("STAND-IN UNKNOWN REQUEST")) this.problems.push(line);
          this.#options.onLog?.(record, line);
        },
      });
      if (container.removing !== undefined) {
        // Removed while its process was being launched: the process must not outlive it.
        await process.remove();
        container.markLaunched();
        return;
      }
      container.process = process;
      record.workspace = process.workspace;
      this.#note(record, "running", String(process.pid));
      container.markLaunched();
      const { code } = await process.exited;
      record.log = process.log;
      record.exitCode = code;
      container.status = "exited";
      this.#note(record, "exit", String(code));
      container.markExited();
    };
    const cold = faults.coldStartMs ?? 0;
    const run = () =>
      launch().catch((error: unknown) => {
        this.problems.push(`container ${record.name} failed to launch: ${String(error)}`);
        record.exitCode = 127;
        container.status = "exited";
        container.markExited();
        container.markLaunched();
      });
    if (faults.startGate !== undefined) void faults.startGate.then(run);
    else if (cold > 0) setTimeout(run, cold);
    else void run();
  }

  async #remove(container: AppContainer): Promise<void> {
    const { record } = container;
    if (container.removing !== undefined) return container.removing;
    this.#note(record, "delete");
    container.removing = (async () => {
      if (container.process !== undefined) {
        await container.process.remove();
      } else {
        // Never launched (or still in its cold start): it can no longer run.
        record.exitCode ??= 137;
        container.status = "exited";
        container.markExited();
        container.markLaunched();
      }
      await container.exited;
      // Deleted once no process of it is left.
      record.deleted = true;
      container.markRemoved();
    })();
    return container.removing;
  }

  async #sidecarRoute(
    sidecar: Sidecar,
    method: string,
    action: string,
    response: ServerResponse,
  ): Promise<void> {
    const { record } = sidecar;
    if (method === "POST" && action === "/start") {
      if (sidecar.server !== undefined) return send(response, 304);
      this.#note(record, "start");
      await this.#openSidecar(sidecar);
      return send(response, 204);
    }
    if (method === "GET" && action === "/json") {
      const running = sidecar.server !== undefined;
      return send(response, 200, {
        Id: record.id,
        Name: `/${record.name}`,
        State: { Status: running ? "running" : "created", Running: running, ExitCode: 0, Pid: 0 },
        Config: { Image: record.image },
        NetworkSettings: {
          Ports: running
            ? {
                [`${SIDECAR_INGRESS_PORT}/tcp`]: [
                  { HostIp: "127.0.0.1", HostPort: String(sidecar.port) },
                ],
              }
            : {},
        },
      });
    }
    if (method === "POST" && action === "/wait") {
      return send(response, 200, { StatusCode: 0, Error: null });
    }
    if (method === "DELETE" && action === "") {
      this.#note(record, "delete");
      record.deleted = true;
      await this.#closeSidecar(sidecar);
      this.#sidecars.delete(sidecar.name);
      return send(response, 204);
    }
    this.problems.push(`unknown sidecar request: ${method} ${action} on ${record.name}`);
    send(response, 500, { message: "harness engine: unknown sidecar request" });
  }

  /** The sidecar's ingress: CONNECT into the app container, `GET /ca`, `PUT /egress`. */
  async #openSidecar(sidecar: Sidecar): Promise<void> {
    const server = createServer((request, response) => {
      void readBody(request).then((body) => {
        if (request.method === "GET" && request.url === "/ca") return send(response, 200, FAKE_CA);
        if (request.method === "PUT" && request.url === "/egress") {
          sidecar.egress.push(JSON.parse(body) as EgressConfig);
          return send(response, 200, {});
        }
        this.problems.push(`unknown sidecar ingress request: ${request.method} ${request.url}`);
        send(response, 500, { message: "harness sidecar: unknown request" });
      });
    });
    const tunnels = new Set<Socket>();
    sidecar.tunnels = tunnels;
    server.on("connect", (request: IncomingMessage, client: Socket, head: Buffer) => {
      tunnels.add(client);
      client.once("close", () => tunnels.delete(client));
      void this.#tunnel(sidecar, request, client, head);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    sidecar.server = server;
    sidecar.port = (server.address() as AddressInfo).port;
  }

  async #tunnel(sidecar: Sidecar, request: IncomingMessage, client: Socket, head: Buffer) {
    client.on("error", () => {});
    const target = String(request.headers["x-dst-addr"] ?? request.url ?? "");
    const port = Number(target.split(":").at(-1));
    const container = [...this.#containers.values()].find(
      (c) => c.sidecar === sidecar.name && c.status === "running" && !c.record.deleted,
    );
    const upstream = await container?.process?.connect(port);
    if (container === undefined || upstream === undefined) {
      client.end("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    // A connection may carry several requests one after the other (workerd keeps it open):
    // each request line is recorded, found where a chunk or a message starts.
    const sniff = (chunk: Buffer) => {
      const text = chunk.toString("latin1");
      for (const match of text.matchAll(REQUEST_LINE)) {
        container.record.requests.push({ line: match[1] as string, at: Date.now() });
      }
    };
    if (head.length > 0) {
      sniff(head);
      upstream.write(head);
    }
    client.on("data", sniff);
    client.pipe(upstream);
    upstream.pipe(client);
    upstream.resume();
  }

  async #closeSidecar(sidecar: Sidecar): Promise<void> {
    const server = sidecar.server;
    if (server === undefined) return;
    sidecar.server = undefined;
    server.closeAllConnections();
    for (const tunnel of sidecar.tunnels ?? []) tunnel.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
