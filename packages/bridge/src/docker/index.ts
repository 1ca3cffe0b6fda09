/**
 * The docker backend: one fresh container per call, from the deployer's image, over the Docker
 * Engine API (Docker, or Podman's compatible service; runc, gVisor's runsc or any runtime the
 * engine knows). The engine enforces the limits; the container is removed on every path, and
 * containers a crashed bridge left behind are swept by the next backend on the same machine. A
 * small pool of containers made and attached to ahead of calls hides the slow half of a start;
 * each serves exactly one call.
 */

import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { Agent } from "node:http";
import type { Socket } from "node:net";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { brandClass, DOCKER_TEXTS } from "@remote-task/internal";
import type { SandboxReport } from "@remote-task/protocol";
import {
  BackendError,
  type ExecSpec,
  type RunningCommand,
  type SandboxBackend,
} from "../backend.js";
import type { EgressOptions } from "../host/egress.js";
import type { Endpoint } from "../host/egress-policy.js";
import { InFlight, type InFlightCounts } from "../host/in-flight.js";
import { checkedPatterns, stderrWarnings } from "../host/options.js";
import { isInstanceName, newInstanceName, ownerAlive } from "../host/ownership.js";
import type { BridgeLogger } from "../logger.js";
import type { NetworkMode } from "../network.js";
import { resolveEngineAddress } from "./address.js";
import {
  type ContainerSettings,
  callScript,
  checkCwd,
  type DockerLimits,
  LABELS,
} from "./container.js";
import {
  type Containers,
  engineContainers,
  exitCode,
  type Prepared,
  trialStart,
} from "./containers.js";
import { createEngineClient, type EngineClient, EngineError } from "./engine.js";
import { awaitReady, callOutput } from "./handshake.js";
import {
  type ContainerNetwork,
  type NetworkProbe,
  probeContainerNetwork,
  startContainerNetwork,
} from "./network.js";
import { checkLimits, checkPoolSize, checkUlimits, DEFAULT_DOCKER_LIMITS } from "./options.js";
import { containerSeccompProfile } from "./seccomp.js";
import { containerUsers } from "./users.js";
import { WarmPool } from "./warm-pool.js";

export { defaultSockets, parseEngineAddress } from "./address.js";
export { type DockerLimits, LABELS } from "./container.js";
export { EngineError } from "./engine.js";
export { DEFAULT_DOCKER_LIMITS, ULIMIT_NAMES } from "./options.js";

export interface DockerBackendOptions {
  /** The image every call runs in (it is never pulled: build or pull it beforehand). */
  image: string;
  /**
   * The engine: `unix:///path/to.sock` or `tcp://host:port` (default `DOCKER_HOST`, else the
   * first of `/var/run/docker.sock`, `~/.docker/run/docker.sock`, rootless and rootful Podman's
   * sockets that exists).
   */
  engine?: string | undefined;
  /** The engine's OCI runtime for the containers, e.g. `runsc` (default: the engine's own). */
  runtime?: string | undefined;
  /**
   * Who the command runs as, `uid:gid` or a user of the image (default: a uid of its own per
   * container, 60001..64999, that no host account has; see docker/users.ts).
   */
  user?: string | undefined;
  /** Per-container limits (default {@link DEFAULT_DOCKER_LIMITS}). */
  limits?: Partial<DockerLimits> | undefined;
  /**
   * More rlimits for every container (soft = hard), by the engine's names, e.g. `{ nproc: 65536 }`
   * where Podman's default process-count rlimit is above what its host allows. The open-files
   * limit is `limits.openFiles`.
   */
  ulimits?: Readonly<Record<string, number>> | undefined;
  /**
   * Containers made (and, on Podman, set up by the runtime) ahead of calls, so a call only starts
   * one (default 2; 0: none). Each serves exactly one call and is then removed like any other.
   */
  pool?: number | undefined;
  /** Mount the image's filesystem read-only (default true; `/workspace` and `/tmp` are tmpfs). */
  readOnlyRootfs?: boolean | undefined;
  /** What calls with network `open` or an allowlist may reach besides public addresses. */
  egress?: EgressOptions | undefined;
  /** Told (a warning) why calls get network `none` only, when that is all it can enforce. */
  logger?: BridgeLogger | undefined;
}

export type DockerBackendStats = InFlightCounts;

/** The docker backend (see the top of this file). */
export interface DockerBackend extends SandboxBackend {
  readonly name: "docker";
  readonly isolation: "container";
  readonly image: string;
  /** The runtime asked for, or undefined for the engine's default. */
  readonly runtime: string | undefined;
  /** The owner label value of this backend's containers. */
  readonly instance: string;
  readonly sandbox: SandboxReport;
  /**
   * Resolves once the engine answered, the image is there and what dead predecessors left is
   * swept; rejects with {@link DockerUnavailableError} otherwise (`start` fails the same way).
   */
  readonly ready: Promise<void>;
  liveSandboxes(): number;
  stats(): DockerBackendStats;
  /** Why only network `none` is offered (undefined when `open` and allowlists are). */
  readonly networkUnavailable: string | undefined;
  /** Keeps calls' egress away from where the bridge listens (the Node host calls it). */
  excludeFromEgress(endpoint: Endpoint): void;
  /** Removes every container of this backend. Idempotent. */
  close(): Promise<void>;
}

/** The engine cannot be reached, or it does not have the image. */
export class DockerUnavailableError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.DockerUnavailableError");
  override readonly name = "DockerUnavailableError";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The directory of a backend's proxy sockets, in the temporary directory, is this + its instance. */
const SOCKET_DIR_PREFIX = "remote-task-docker-";

interface Call {
  id?: string;
  /** Settles once the create/attach/start sequence has, whatever its outcome. */
  startup: Promise<unknown>;
  socket?: Socket;
  /** The egress proxy and relay of a call with network. */
  network?: ContainerNetwork;
  removal?: Promise<void>;
}

/** What one backend set up once and each of its calls uses. */
interface Backend {
  readonly image: string;
  readonly engine: EngineClient;
  readonly containers: Containers;
  readonly pool: WarmPool;
  readonly ready: Promise<void>;
  closed: boolean;
  /**
   * The call's proxy and relay inside the started container: their environment, and with
   * secrets the certificate of the sandbox's CA.
   */
  startNetwork(
    spec: ExecSpec,
    call: Call,
    id: string,
  ): Promise<Pick<ContainerNetwork, "env" | "caCertificate">>;
}

/** What `/health` reports of the containers (the runtime is filled in once known). */
function containerReport(options: DockerBackendOptions, limits: DockerLimits): SandboxReport {
  return {
    user: "container",
    processes: { max: limits.processes, by: "container" },
    memoryBytes: { max: limits.memoryBytes, by: "container" },
    workspaceBytes: { max: limits.workspaceBytes, by: "tmpfs" },
    tmpBytes: { max: limits.tmpBytes, by: "tmpfs" },
    teardown: "container",
    image: options.image,
    ...(options.runtime === undefined ? {} : { runtime: options.runtime }),
  };
}

/**
 * Whether calls can get network here (the relay's tools, or why not, said once as a warning),
 * and the modes that makes.
 */
function probeNetwork(
  options: DockerBackendOptions,
  endpoint: Parameters<typeof engineContainers>[1],
) {
  const probe: NetworkProbe = probeContainerNetwork(endpoint, options.runtime);
  const unavailable = "reason" in probe ? probe.reason : undefined;
  if (unavailable !== undefined) {
    (options.logger ?? stderrWarnings)({
      event: "warning",
      level: "warn",
      detail: `containers get no network access at all (network "none" only): ${unavailable}`,
    });
  }
  const modes: NetworkMode[] = unavailable === undefined ? ["none", "allow", "open"] : ["none"];
  return { probe, unavailable, modes };
}

/** Removes the proxy socket directories of this machine's dead docker backends. */
function sweepSocketDirs(): void {
  for (const name of readdirSync(tmpdir())) {
    const owner = name.slice(SOCKET_DIR_PREFIX.length);
    if (name.startsWith(SOCKET_DIR_PREFIX) && isInstanceName(owner) && !ownerAlive(owner))
      rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
}

/**
 * Checks the engine and the image, sweeps what dead bridges on this machine left, learns whether
 * the engine is Podman (whose seccomp profile goes in a file) and tries one start.
 */
async function startUp(setup: {
  engine: EngineClient;
  containers: Containers;
  settings: ContainerSettings;
  report: SandboxReport;
  host: string;
  ownDir: () => string;
}): Promise<void> {
  const { engine, containers, settings, report } = setup;
  sweepSocketDirs();
  const swept = containers.sweep(
    (owner, labels) => labels[LABELS.host] === setup.host && !ownerAlive(owner),
  );
  swept.catch(() => {});
  const version = engine.json<{ Components?: Array<{ Name?: string }> }>({
    method: "GET",
    path: "/version",
  });
  version.catch(() => {});
  const info = engine.json<{ DefaultRuntime?: string }>({ method: "GET", path: "/info" });
  info.catch(() => {});
  try {
    await engine.json({
      method: "GET",
      path: `/images/${encodeURIComponent(settings.image)}/json`,
    });
  } catch (error) {
    if (EngineError.isInstance(error) && error.status === 404) {
      throw new DockerUnavailableError(DOCKER_TEXTS.noImage(settings.image), { cause: error });
    }
    throw new DockerUnavailableError((error as Error).message, { cause: error });
  }
  settings.podman = ((await version).body.Components ?? []).some((c) =>
    /podman/i.test(c.Name ?? ""),
  );
  if (settings.podman) {
    // Podman reads a profile from a path only (of its machine: the engine on this one).
    const path = join(setup.ownDir(), "seccomp.json");
    writeFileSync(path, settings.seccomp, { mode: 0o644 });
    settings.seccomp = path;
  }
  await swept;
  try {
    await trialStart(containers);
  } catch (error) {
    const reason = containers.withFix((error as Error).message);
    throw new DockerUnavailableError(DOCKER_TEXTS.noStart(reason), { cause: error });
  }
  if (report.runtime === undefined) {
    const runtime = (await info.catch(() => undefined))?.body?.DefaultRuntime;
    if (typeof runtime === "string" && runtime !== "") report.runtime = runtime;
  }
}

/** Makes (or takes) the call's container and starts it; the call owns it from the moment it exists. */
async function launch(
  backend: Backend,
  spec: ExecSpec,
  call: Call,
): Promise<{ container: Prepared; warm: boolean }> {
  const failed = (error: unknown) =>
    BackendError.isInstance(error)
      ? error
      : new BackendError(
          "sandbox_error",
          DOCKER_TEXTS.notStarted(backend.containers.withFix((error as Error).message)),
        );
  const startIt = async (from: Promise<Prepared>): Promise<Prepared> => {
    const container = await from;
    container.socket.ref();
    call.id = container.id;
    call.socket = container.socket;
    if (spec.signal.aborted) throw new BackendError("sandbox_error", DOCKER_TEXTS.endedEarly);
    if (container.socket.destroyed) throw new Error("its attach stream was closed");
    await backend.containers.start(container.id);
    return container;
  };
  const taken = backend.pool.take();
  try {
    return { container: await startIt(taken ?? backend.containers.prepare()), warm: !!taken };
  } catch (error) {
    if (taken === undefined || BackendError.isInstance(error)) throw failed(error);
  }
  // A pooled container that could not be made or started (the engine restarted, say): remove
  // it and make one for this call.
  call.socket?.destroy();
  if (call.id !== undefined) await backend.containers.remove(call.id).catch(() => {});
  delete call.id;
  delete call.socket;
  try {
    return { container: await startIt(backend.containers.prepare()), warm: false };
  } catch (again) {
    throw failed(again);
  }
}

/** One call: its container started, its script sent, its output once the prelude said ready. */
async function begin(
  backend: Backend,
  spec: ExecSpec,
  call: Call,
  remove: () => Promise<void>,
): Promise<RunningCommand> {
  const cwd = checkCwd(spec);
  try {
    await backend.ready;
  } catch (error) {
    throw new BackendError("sandbox_error", (error as Error).message);
  }
  if (backend.closed) throw new BackendError("sandbox_error", DOCKER_TEXTS.closed);
  const nonce = randomBytes(8).toString("hex");
  const { container, warm } = await launch(backend, spec, call);
  const { id, socket, reader } = container;
  // The container's shell waits for its script: the relay listens before the command exists.
  const network = await backend.startNetwork(spec, call, id);
  // A command that does not read its input ends with it unwritten: no error.
  socket.on("error", () => {});
  socket.write(
    callScript(
      { ...spec, env: { ...network.env, ...spec.env } },
      cwd,
      nonce,
      network.caCertificate,
    ),
  );
  if (spec.stdin === undefined) socket.end();
  const exit = exitCode(backend.engine, id, reader);
  exit.catch(() => {});
  spec.signal.addEventListener("abort", () => void remove().catch(() => {}), { once: true });
  const early = await awaitReady({ spec, socket, reader, nonce, cwd, image: backend.image, exit });
  return { output: callOutput(early, reader), exit, warm };
}

/**
 * Creates the docker backend. Nothing is contacted synchronously: `ready` (awaited by every
 * `start`) checks the engine and the image and sweeps dead bridges' containers.
 */
export function createDockerBackend(options: DockerBackendOptions): DockerBackend {
  if (typeof options.image !== "string" || options.image === "") {
    throw new TypeError("The docker backend needs an image (e.g. `ubuntu:24.04`).");
  }
  const limits = checkLimits(options.limits);
  const { endpoint } = resolveEngineAddress(options.engine);
  const engine = createEngineClient(
    endpoint,
    new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY }),
  );
  const instance = newInstanceName();
  const host = hostname();
  const user = options.user;
  const settings: ContainerSettings = {
    image: options.image,
    user: user === undefined ? containerUsers() : () => user,
    seccomp: JSON.stringify(containerSeccompProfile()),
    runtime: options.runtime,
    readOnlyRootfs: options.readOnlyRootfs ?? true,
    limits,
    ulimits: checkUlimits(options.ulimits),
    podman: false,
    labels: { [LABELS.owner]: instance, [LABELS.host]: host },
  };
  const report = containerReport(options, limits);
  const allowPrivate = checkedPatterns(options.egress?.allowPrivate);
  const network = probeNetwork(options, endpoint);
  const bridgeEndpoints: Endpoint[] = [];
  /**
   * This backend's directory (made on first use): the calls' proxy sockets, Podman's seccomp
   * profile; removed on close, and named by the instance so that the next backend removes a
   * crashed one's (its relays died with it).
   */
  let socketDir: string | undefined;
  function ownDir(): string {
    if (socketDir === undefined) {
      const dir = join(tmpdir(), `${SOCKET_DIR_PREFIX}${instance}`);
      // Fails if it exists: nobody else chose this directory. The relay's uid may pass through.
      mkdirSync(dir, { mode: 0o700 });
      chmodSync(dir, 0o711);
      socketDir = dir;
    }
    return socketDir;
  }
  let serial = 0;

  const calls = new InFlight<Call>();
  const containers = engineContainers(engine, endpoint, settings);
  const pool = new WarmPool(checkPoolSize(options.pool), containers);
  const ready = startUp({ engine, containers, settings, report, host, ownDir }).then(() =>
    pool.refill(),
  );
  // A rejection is reported by `start` and `close`; never as an unhandled rejection.
  ready.catch(() => {});

  const backend: Backend = {
    image: options.image,
    engine,
    containers,
    pool,
    ready,
    closed: false,
    async startNetwork(spec, call, id) {
      const policy = spec.network ?? "none";
      if (policy === "none") return { env: {}, caCertificate: undefined };
      const { probe } = network;
      if ("reason" in probe)
        throw new BackendError("sandbox_error", DOCKER_TEXTS.noRelay(probe.reason));
      try {
        const { body } = await engine.json<{ State?: { Pid?: number } }>({
          method: "GET",
          path: `/containers/${id}/json`,
        });
        call.network = await startContainerNetwork({
          tools: probe.tools,
          containerId: id,
          pid: body.State?.Pid ?? 0,
          policy,
          callersAllowlist: spec.callersAllowlist,
          secrets: spec.secrets,
          upstreamCa: options.egress?.upstreamCa,
          socketPath: join(ownDir(), `egress-${++serial}.sock`),
          allowPrivate,
          protectedEndpoints: () => bridgeEndpoints,
        });
        return call.network;
      } catch (error) {
        throw new BackendError("sandbox_error", DOCKER_TEXTS.noRelay((error as Error).message));
      }
    },
  };

  /** Removes the call's container once (it may still be being created). */
  function remove(call: Call): Promise<void> {
    call.removal ??= (async () => {
      await call.startup;
      call.socket?.destroy();
      await call.network?.close();
      if (call.id !== undefined) await containers.remove(call.id);
    })();
    return call.removal;
  }

  function destroy(sandboxId: string): Promise<void> {
    const call = calls.get(sandboxId);
    if (call === undefined) return Promise.resolve();
    return remove(call).then(
      () => calls.remove(sandboxId),
      (error: unknown) => {
        throw new BackendError(
          "sandbox_error",
          `The container of sandbox ${sandboxId} could not be removed: ${(error as Error).message}`,
        );
      },
    );
  }

  return {
    name: "docker",
    isolation: "container",
    networkModes: network.modes,
    injectsSecrets: network.modes.includes("allow"),
    networkUnavailable: network.unavailable,
    image: options.image,
    runtime: options.runtime,
    instance,
    sandbox: report,
    ready,
    async health() {
      if (report.runtime === undefined) {
        // The engine's default runtime, asked once (its /info is slow on Podman).
        const info = await engine.json<{ DefaultRuntime?: string }>({
          method: "GET",
          path: "/info",
        });
        if (typeof info.body?.DefaultRuntime === "string")
          report.runtime = info.body.DefaultRuntime;
      }
      const warmPool = pool.report();
      return { sandbox: report, ...(warmPool === undefined ? {} : { warmPool }) };
    },

    start(spec) {
      const call: Call = { startup: Promise.resolve() };
      try {
        calls.add(spec.sandboxId, call);
      } catch (error) {
        return Promise.reject(error);
      }
      const running = begin(backend, spec, call, () => remove(call));
      call.startup = running.catch(() => {});
      return running;
    },

    destroy,
    excludeFromEgress(where) {
      bridgeEndpoints.push({ host: where.host, port: where.port });
    },
    liveSandboxes: () => calls.size,
    stats: () => calls.counts(),

    async close() {
      if (backend.closed) return;
      backend.closed = true;
      await Promise.allSettled([...calls.ids().map(destroy), pool.close()]);
      // Whatever this backend made that no call knows of any more (a create whose answer was lost).
      await ready.then(() => containers.sweep((owner) => owner === instance)).catch(() => {});
      if (socketDir !== undefined) rmSync(socketDir, { recursive: true, force: true });
      engine.close();
    },
  };
}
