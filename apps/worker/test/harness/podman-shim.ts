/**
 * A Docker Engine API shim in front of real Podman, for workerd's container client: what a
 * Durable Object's `ctx.container` talks to under Miniflare (`containerEngine: { localDocker: {
 * socketPath: "unix:" + shim.socketPath } }`). Everything goes to Podman's Docker-compatible API
 * (scripts/docker-engine.mjs `ensure` starts it) except what Podman cannot do here, or does
 * otherwise than Cloudflare:
 *
 * - The egress sidecar. workerd creates `<name>-proxy` from `cloudflare/proxy-everything` (not
 *   pullable here) and puts the app container in its network (`NetworkMode:
 *   container:<name>-proxy`). The shim emulates the sidecar in-process: an HTTP server on a
 *   loopback port, shown as `39001/tcp` in its inspect answer, answering `PUT /egress` (kept in
 *   the container's record) and `GET /ca`. The app container gets a network of its own instead:
 *   `none` unless the last egress settings enable the internet, then Podman's `bridge`.
 * - Limits. The app container's `nproc` and `nofile` rlimits are set to the engine's own hard
 *   limits (runc cannot raise them without CAP_SYS_RESOURCE, which this machine lacks).
 * - Restarts. workerd asks for `RestartPolicy: on-failure` with no retry limit; the shim asks for
 *   none, so a container whose PID 1 dies stays dead, as on Cloudflare.
 *
 * Every container the shim creates carries the label `remote-task.shim=<id>` of this shim, so a
 * test removes only its own (`close()` force-removes those left), and is named in Podman with the
 * shim's id appended (`<name>-<id>`; the shim translates names both ways): workerd names a
 * container after its Durable Object's id, the same in every run of a test, so two test runs on
 * one Podman service would otherwise share containers, and a run would find the containers a
 * crashed one left. Those (labelled `remote-task.shim.pid` with a process no longer alive) are
 * removed when a shim starts. Hijacked streams (an exec's `POST /exec/{id}/start` with
 * `Upgrade: tcp`) are piped to Podman byte for byte.
 *
 * What workerd does with the engine, as seen here (workerd 1.20261102): `exec(argv)` runs
 * `/bin/sh -c 'echo $$ > /tmp/.workerd-exec-<uuid>.pid; exec "$@"' sh <argv...>` (an image needs
 * `/bin/sh` and a writable /tmp), attached with `Upgrade: tcp`, then polls `GET /exec/{id}/json`
 * for the exit code; `kill(signal)` is a detached exec of `kill -<signal> "$(cat <that file>)"`,
 * which reaches that one process, not its children; `destroy()` is `DELETE ?force=true`.
 * Outbound interception (`interceptOutboundHttp(s)`) sends the sidecar `dns.allowHostnames: ["*"]`
 * and copies the sidecar's CA into the container (`PUT /containers/{id}/archive?path=/etc`, to
 * /etc/cloudflare/certs/cloudflare-containers-ca.crt); the traffic itself is not carried here
 * (the container's network is `none`; the fake engine, engine.ts, carries plain HTTP). workerd's egress listener (the `port` of `PUT /egress`,
 * on 127.0.0.1 here) takes `CONNECT <ip>:80` and then plain HTTP, which reaches the binding.
 *
 * The test image (localhost/remote-task-test:latest: static busybox and bash) has no init that
 * stays up, so a Durable Object starts it with this PID 1 (`TEST_IMAGE_ENTRYPOINT`), which stays
 * up between execs and exits at once on SIGTERM (a shell loop alone ignores SIGTERM as PID 1 and
 * would cost Podman's stop timeout):
 *
 *   ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { type AddressInfo, createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The test image's PID 1: stays up, exits at once on SIGTERM (see the overview). */
export const TEST_IMAGE_ENTRYPOINT: readonly string[] = [
  "/bin/sh",
  "-c",
  "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done",
];

/** The label on every container a shim creates; its value is the shim's `id`. */
export const SHIM_LABEL = "remote-task.shim";
/** The label with the pid of the process running the shim (for removing a dead one's). */
export const PID_LABEL = "remote-task.shim.pid";

const SIDECAR_INGRESS_PORT = 39001;
const FAKE_CA =
  "-----BEGIN CERTIFICATE-----\nremote-task harness: no TLS interception\n-----END CERTIFICATE-----\n";
const ENGINE_SCRIPT = fileURLToPath(
  new URL("../../../../scripts/docker-engine.mjs", import.meta.url),
);

/** What `node scripts/docker-engine.mjs ensure` reports of the Podman service it started. */
export interface PodmanEngine {
  /** Podman's Docker API socket (a path). */
  socketPath: string;
  /** The test image, `localhost/remote-task-test:latest`. */
  image: string;
  /** The service's state directory (its `service.pid` names the service process). */
  dir: string;
}

/** Starts the project's Podman service (or finds it running) and builds the test image. */
export function ensurePodman(): PodmanEngine {
  let out: string;
  try {
    out = execFileSync(process.execPath, [ENGINE_SCRIPT, "ensure"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 120_000,
    });
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new Error(`no Podman engine: ${stderr || (error as Error).message}`);
  }
  const report = JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as {
    host: string;
    image: string;
    dir: string;
  };
  return {
    socketPath: report.host.replace(/^unix:\/\//, ""),
    image: report.image,
    dir: report.dir,
  };
}

/**
 * The Podman engine for tests on real containers, or why there is none. As the docker backend's
 * tests do, such tests are skipped without one (`skip`), except under
 * REMOTE_TASK_REQUIRE_DOCKER=1 (CI), where they run and fail.
 */
export function podmanForTests(): { engine?: PodmanEngine; skip: boolean; reason: string } {
  try {
    return { engine: ensurePodman(), skip: false, reason: "" };
  } catch (error) {
    const reason = (error as Error).message;
    const required = process.env.REMOTE_TASK_REQUIRE_DOCKER === "1";
    console.warn(
      `\n*** tests on real containers SKIPPED: ${reason}${required ? " (REMOTE_TASK_REQUIRE_DOCKER=1: failing)" : ""} ***\n`,
    );
    return { skip: !required, reason };
  }
}

/** What workerd sends as a sidecar's egress settings (`PUT /egress`). */
interface EgressConfig {
  port?: number;
  dns?: { allowHostnames?: string[] };
  internet?: { enabled?: boolean };
}

/** One app container the shim created (sidecars are not Podman containers). */
interface ShimContainer {
  /** The name workerd chose: `workerd-<worker>-<class>-<Durable Object id>`. */
  name: string;
  /** Its name in Podman: `<name>-<shim id>`. */
  podmanName: string;
  /** Podman's id. */
  id: string;
  /** The Durable Object id (hex) in its name. */
  durableObjectId: string | undefined;
  /** The network Podman gave it: `none` or `bridge`. */
  network: string;
  /** The egress settings workerd sent its sidecar, in order. */
  egress: EgressConfig[];
  /** Set once a `DELETE` of it succeeded. */
  deleted: boolean;
}

export interface PodmanShimOptions {
  /** The Podman engine (default: `ensurePodman()`'s, the project's service). */
  engine?: PodmanEngine | undefined;
  /** Every request line and its answer's status, for debugging. */
  log?: ((line: string) => void) | undefined;
}

export interface PodmanShim {
  /** The shim's unix socket; Miniflare wants `unix:${socketPath}`. */
  readonly socketPath: string;
  /** The value of `SHIM_LABEL` on its containers. */
  readonly id: string;
  /** Every app container it created, in order. */
  readonly containers: readonly ShimContainer[];
  /** Requests it could not serve (an upstream error); a test fails if any. */
  readonly problems: readonly string[];
  /** Force-removes its containers still present, stops its sidecars, closes the socket. */
  close(): Promise<void>;
}

interface Sidecar {
  name: string;
  id: string;
  server?: Server;
  port?: number;
  egress: EgressConfig[];
}

interface Limits {
  nproc?: number;
  nofile?: number;
}

/**
 * The engine's hard `nproc` and `nofile` limits, read from its service process (see the
 * overview); this process's own when that cannot be read.
 */
function engineLimits(dir: string): Limits {
  const limits: Limits = {};
  let text: string;
  try {
    const pid = readFileSync(join(dir, "service.pid"), "utf8").trim();
    text = readFileSync(`/proc/${pid}/limits`, "utf8");
  } catch {
    text = readFileSync("/proc/self/limits", "utf8");
  }
  for (const line of text.split("\n")) {
    const hard = line.split(/\s{2,}/)[2];
    if (hard === undefined || !/^\d+$/.test(hard)) continue;
    if (line.startsWith("Max processes")) limits.nproc = Number(hard);
    if (line.startsWith("Max open files")) limits.nofile = Number(hard);
  }
  return limits;
}

function send(response: ServerResponse, status: number, body?: unknown): void {
  const text = body === undefined ? "" : typeof body === "string" ? body : JSON.stringify(body);
  response.writeHead(status, {
    "content-type": typeof body === "string" ? "text/plain" : "application/json",
    "content-length": Buffer.byteLength(text),
  });
  response.end(text);
}

async function readBody(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Sends one request to Podman and answers with its whole answer. */
function upstreamCall(
  socketPath: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = httpRequest(
      {
        socketPath,
        method,
        path,
        headers: {
          host: "localhost",
          ...(text === undefined
            ? {}
            : { "content-type": "application/json", "content-length": Buffer.byteLength(text) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

export async function startPodmanShim(options: PodmanShimOptions = {}): Promise<PodmanShim> {
  const engine = options.engine ?? ensurePodman();
  const upstream = engine.socketPath;
  await removeDeadShimsContainers(upstream);
  const shim = new Shim(upstream, engineLimits(engine.dir), options.log);
  await shim.listen();
  return shim;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Removes the containers of shims whose process is gone (a test run that crashed). */
async function removeDeadShimsContainers(upstream: string): Promise<void> {
  const filters = encodeURIComponent(JSON.stringify({ label: [PID_LABEL] }));
  const listed = await upstreamCall(
    upstream,
    "GET",
    `/containers/json?all=true&filters=${filters}`,
  );
  if (listed.status !== 200) return;
  const containers = JSON.parse(listed.body) as Array<{
    Id: string;
    Labels?: Record<string, string>;
  }>;
  await Promise.all(
    containers
      .filter((c) => !alive(Number(c.Labels?.[PID_LABEL])))
      .map((c) => upstreamCall(upstream, "DELETE", `/containers/${c.Id}?force=true`)),
  );
}

class Shim implements PodmanShim {
  readonly id = randomBytes(6).toString("hex");
  readonly containers: ShimContainer[] = [];
  readonly problems: string[] = [];
  socketPath = "";
  readonly #upstream: string;
  readonly #limits: Limits;
  readonly #log: (line: string) => void;
  readonly #server: Server;
  readonly #sidecars = new Map<string, Sidecar>();
  /** Hijacked connections: no longer the HTTP server's, closed by `close()` itself. */
  readonly #hijacked = new Set<Socket>();
  /** Egress settings per app container name, shared by its sidecar and its record. */
  readonly #egress = new Map<string, EgressConfig[]>();
  #dir = "";

  constructor(upstream: string, limits: Limits, log?: (line: string) => void) {
    this.#upstream = upstream;
    this.#limits = limits;
    this.#log = log ?? (() => {});
    this.#server = createServer((request, response) => {
      this.#route(request, response).catch((error: unknown) => {
        this.problems.push(`${request.method} ${request.url}: ${String(error)}`);
        if (!response.headersSent) send(response, 502, { message: String(error) });
        else response.destroy();
      });
    });
    this.#server.on("upgrade", (request: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#hijack(request, socket, head),
    );
  }

  async listen(): Promise<void> {
    this.#dir = await mkdtemp(join(tmpdir(), "rt-podman-shim-"));
    this.socketPath = join(this.#dir, "docker.sock");
    await new Promise<void>((resolve) => this.#server.listen(this.socketPath, resolve));
  }

  #egressOf(name: string): EgressConfig[] {
    let egress = this.#egress.get(name);
    if (egress === undefined) {
      egress = [];
      this.#egress.set(name, egress);
    }
    return egress;
  }

  async #route(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const method = request.method ?? "GET";
    const url = new URL(request.url ?? "/", "http://engine");
    const path = url.pathname.replace(/^\/v\d+\.\d+/, "");
    const body = await readBody(request);
    if (method === "POST" && path === "/containers/create") {
      const name = url.searchParams.get("name") ?? "";
      if (name.endsWith("-proxy")) return this.#createSidecar(name, response);
      return this.#createApp(name, url, body, response);
    }
    if (method === "GET" && path === "/networks/bridge") return this.#bridgeNetwork(response);
    const match = /^\/containers\/([^/]+)(\/[a-z]+)?$/.exec(path);
    const sidecar =
      match === null ? undefined : this.#sidecars.get(decodeURIComponent(match[1] ?? ""));
    if (sidecar !== undefined)
      return this.#sidecarRoute(sidecar, method, match?.[2] ?? "", response);
    await this.#forward(request, body, response);
    if (method === "DELETE" && match !== null && match[2] === undefined) {
      const name = decodeURIComponent(match[1] ?? "");
      const record = this.containers.find((c) => c.name === name || c.id === name);
      if (record !== undefined && response.statusCode < 300) record.deleted = true;
    }
  }

  /**
   * Podman's bridge network with a loopback gateway: workerd binds its egress listener (which
   * the emulated sidecar never calls) to the gateway, and Podman's exists only while a container
   * uses the network.
   */
  async #bridgeNetwork(response: ServerResponse): Promise<void> {
    const answer = await upstreamCall(this.#upstream, "GET", "/networks/bridge");
    if (answer.status !== 200) return send(response, answer.status, answer.body);
    const network = JSON.parse(answer.body) as { IPAM?: { Config?: unknown[] } };
    send(response, 200, {
      ...network,
      IPAM: { ...network.IPAM, Config: [{ Subnet: "127.0.0.0/8", Gateway: "127.0.0.1" }] },
    });
  }

  /**
   * `path` (with its query) with a container name workerd chose turned into its name in Podman
   * (see the overview); ids and the collection's own paths stay.
   */
  #podmanPath(path: string): string {
    return path.replace(
      /^((?:\/v[\d.]+)?\/containers\/)([^/?]+)/,
      (whole, prefix: string, name: string) =>
        /^(create|json|prune)$/.test(name) || /^[0-9a-f]{64}$/.test(name)
          ? whole
          : `${prefix}${name}-${this.id}`,
    );
  }

  /** Forwards a request to Podman and streams its answer back (`/wait` may take long). */
  #forward(request: IncomingMessage, body: Buffer, response: ServerResponse): Promise<void> {
    return new Promise((resolve, reject) => {
      const headers = { ...request.headers };
      delete headers["transfer-encoding"];
      headers["content-length"] = String(body.length);
      const req = httpRequest(
        {
          socketPath: this.#upstream,
          method: request.method,
          path: this.#podmanPath(request.url ?? "/"),
          headers,
        },
        (res) => {
          this.#log(`${request.method} ${request.url} -> ${res.statusCode}`);
          response.writeHead(res.statusCode ?? 502, res.headers);
          res.pipe(response);
          res.on("end", resolve);
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      response.on("close", () => req.destroy());
      req.end(body);
    });
  }

  #createSidecar(name: string, response: ServerResponse): void {
    this.#log(`POST /containers/create?name=${name} (sidecar, emulated)`);
    if (this.#sidecars.has(name)) {
      send(response, 409, { message: `Conflict: ${name}` });
      return;
    }
    const id = randomBytes(32).toString("hex");
    this.#sidecars.set(name, { name, id, egress: this.#egressOf(name.replace(/-proxy$/, "")) });
    send(response, 201, { Id: id, Warnings: [] });
  }

  async #createApp(name: string, url: URL, body: Buffer, response: ServerResponse) {
    const config = JSON.parse(body.toString("utf8")) as {
      Labels?: Record<string, string>;
      HostConfig?: Record<string, unknown> & { NetworkMode?: string };
    };
    const host = config.HostConfig ?? {};
    const sidecarName = (host.NetworkMode ?? "").startsWith("container:")
      ? (host.NetworkMode ?? "").slice("container:".length)
      : undefined;
    const egress = this.#egressOf(name);
    const internet =
      sidecarName === undefined ? undefined : egress.at(-1)?.internet?.enabled === true;
    const network =
      internet === undefined ? (host.NetworkMode ?? "bridge") : internet ? "bridge" : "none";
    const ulimits = Object.entries(this.#limits).map(([Name, value]) => ({
      Name,
      Soft: value,
      Hard: value,
    }));
    const rewritten = {
      ...config,
      ...(network === "none" ? { NetworkDisabled: true } : {}),
      Labels: { ...config.Labels, [SHIM_LABEL]: this.id, [PID_LABEL]: String(process.pid) },
      HostConfig: {
        ...host,
        NetworkMode: network,
        Ulimits: ulimits,
        RestartPolicy: { Name: "no", MaximumRetryCount: 0 },
      },
    };
    const podmanName = `${name}-${this.id}`;
    const answer = await upstreamCall(
      this.#upstream,
      "POST",
      `${url.pathname}?name=${encodeURIComponent(podmanName)}`,
      rewritten,
    );
    this.#log(`POST /containers/create?name=${name} network=${network} -> ${answer.status}`);
    if (answer.status === 201) {
      const { Id } = JSON.parse(answer.body) as { Id: string };
      this.containers.push({
        name,
        podmanName,
        id: Id,
        durableObjectId: /([0-9a-f]{64})$/.exec(name)?.[1],
        network,
        egress,
        deleted: false,
      });
    }
    response.writeHead(answer.status, { "content-type": "application/json" });
    response.end(answer.body);
  }

  async #sidecarRoute(
    sidecar: Sidecar,
    method: string,
    action: string,
    response: ServerResponse,
  ): Promise<void> {
    this.#log(`${method} /containers/${sidecar.name}${action} (sidecar, emulated)`);
    if (method === "POST" && action === "/start") {
      if (sidecar.server !== undefined) return send(response, 304);
      await this.#openSidecar(sidecar);
      return send(response, 204);
    }
    if (method === "GET" && action === "/json") {
      const running = sidecar.server !== undefined;
      return send(response, 200, {
        Id: sidecar.id,
        Name: `/${sidecar.name}`,
        State: { Status: running ? "running" : "created", Running: running, ExitCode: 0, Pid: 0 },
        Config: { Image: "cloudflare/proxy-everything (emulated)" },
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
    if (method === "POST" && action === "/wait") return send(response, 200, { StatusCode: 0 });
    if (method === "POST" && (action === "/kill" || action === "/stop")) {
      await this.#closeSidecar(sidecar);
      return send(response, 204);
    }
    if (method === "DELETE" && action === "") {
      await this.#closeSidecar(sidecar);
      this.#sidecars.delete(sidecar.name);
      return send(response, 204);
    }
    this.problems.push(`unknown sidecar request: ${method} ${action} on ${sidecar.name}`);
    send(response, 500, { message: "podman shim: unknown sidecar request" });
  }

  async #openSidecar(sidecar: Sidecar): Promise<void> {
    const server = createServer((request, response) => {
      void readBody(request).then((body) => {
        this.#log(`sidecar ${sidecar.name}: ${request.method} ${request.url} ${body}`);
        if (request.method === "GET" && request.url === "/ca") return send(response, 200, FAKE_CA);
        if (request.method === "PUT" && request.url === "/egress") {
          sidecar.egress.push(JSON.parse(body.toString("utf8")) as EgressConfig);
          return send(response, 200, {});
        }
        this.problems.push(`unknown sidecar ingress request: ${request.method} ${request.url}`);
        send(response, 500, { message: "podman shim sidecar: unknown request" });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    sidecar.server = server;
    sidecar.port = (server.address() as AddressInfo).port;
  }

  async #closeSidecar(sidecar: Sidecar): Promise<void> {
    const server = sidecar.server;
    if (server === undefined) return;
    delete sidecar.server;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** A hijacked stream (exec start, attach): the request as received, then bytes both ways. */
  #hijack(request: IncomingMessage, client: Socket, head: Buffer): void {
    this.#log(`${request.method} ${request.url} (hijacked)`);
    const upstream = createConnection(this.#upstream);
    const lines = [`${request.method} ${this.#podmanPath(request.url ?? "/")} HTTP/1.1`];
    for (let i = 0; i < request.rawHeaders.length; i += 2) {
      lines.push(`${request.rawHeaders[i]}: ${request.rawHeaders[i + 1]}`);
    }
    upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (head.length > 0) upstream.write(head);
    this.#hijacked.add(client);
    client.once("close", () => this.#hijacked.delete(client));
    upstream.pipe(client);
    client.pipe(upstream);
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    client.on("close", () => upstream.destroy());
  }

  async close(): Promise<void> {
    await Promise.all(
      this.containers
        .filter((c) => !c.deleted)
        .map(async (c) => {
          const answer = await upstreamCall(
            this.#upstream,
            "DELETE",
            `/containers/${c.id}?force=true`,
          );
          if (answer.status < 300 || answer.status === 404) c.deleted = true;
        }),
    );
    for (const sidecar of this.#sidecars.values()) await this.#closeSidecar(sidecar);
    for (const socket of this.#hijacked) socket.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await rm(this.#dir, { recursive: true, force: true });
  }
}
