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
  type OutputChunk,
  type RunningCommand,
  type SandboxBackend,
} from "../backend.js";
import type { EgressOptions } from "../local/egress.js";
import type { Endpoint } from "../local/egress-policy.js";
import { DEFAULT_SANDBOX_LIMITS, resolveSandboxLimits } from "../local/limits.js";
import { isInstanceName, newInstanceName, ownerAlive } from "../local/ownership.js";
import { checkedPatterns, stderrWarnings } from "../local/setup.js";
import type { BridgeLogger } from "../logger.js";
import type { NetworkMode } from "../network.js";
import { resolveEngineAddress } from "./address.js";
import {
  type ContainerSettings,
  callScript,
  checkCwd,
  createBody,
  type DockerLimits,
  LABELS,
  missingCwdMarker,
  readyMarker,
} from "./container.js";
import { createEngineClient, type EngineClient, EngineError } from "./engine.js";
import { FrameReader } from "./frames.js";
import { type ContainerNetwork, probeContainerNetwork, startContainerNetwork } from "./network.js";
import { engineProcessLimit, isNprocRefusal } from "./rlimit.js";
import { containerSeccompProfile } from "./seccomp.js";
import { containerUsers } from "./users.js";

export { defaultSockets, parseEngineAddress } from "./address.js";
export { type DockerLimits, LABELS } from "./container.js";
export { EngineError } from "./engine.js";

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

/** Limits each container gets unless the deployer sets others; reported by `/health`. */
export const DEFAULT_DOCKER_LIMITS: Readonly<DockerLimits> = Object.freeze({
  ...DEFAULT_SANDBOX_LIMITS,
  openFiles: 4096,
});

export interface DockerBackendStats {
  /** Calls started and not yet destroyed. */
  live: number;
  started: number;
  destroyed: number;
}

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

/** Containers made ahead of calls unless the deployer says otherwise. */
const DEFAULT_POOL_SIZE = 2;

/** How long a removal may take before it counts as failed. */
const REMOVE_TIMEOUT_MS = 30_000;

/** A container made for a call (or ahead of one), attached to, not started. */
interface Prepared {
  id: string;
  socket: Socket;
  reader: FrameReader;
}

interface Call {
  id?: string;
  /** Settles once the create/attach/start sequence has, whatever its outcome. */
  startup: Promise<unknown>;
  socket?: Socket;
  /** The egress proxy and relay of a call with network. */
  network?: ContainerNetwork;
  removal?: Promise<void>;
}

function checkLimits(overrides: Partial<DockerLimits> = {}): DockerLimits {
  const { cpus, openFiles, ...shared } = overrides;
  const limits: DockerLimits = {
    ...resolveSandboxLimits(shared),
    openFiles: DEFAULT_DOCKER_LIMITS.openFiles,
  };
  if (cpus !== undefined) {
    if (typeof cpus !== "number" || !Number.isFinite(cpus) || cpus < 0.01) {
      throw new TypeError(`Limit cpus must be a number of at least 0.01; got ${String(cpus)}.`);
    }
    limits.cpus = cpus;
  }
  if (openFiles !== undefined) {
    if (!Number.isSafeInteger(openFiles) || openFiles < 16) {
      throw new TypeError(
        `Limit openFiles must be an integer of at least 16; got ${String(openFiles)}.`,
      );
    }
    limits.openFiles = openFiles;
  }
  return limits;
}

function checkPoolSize(size: number | undefined): number {
  if (size === undefined) return DEFAULT_POOL_SIZE;
  if (!Number.isSafeInteger(size) || size < 0 || size > 64) {
    throw new TypeError(`pool must be an integer from 0 to 64; got ${String(size)}.`);
  }
  return size;
}

/** The rlimits an engine knows by name (`docker run --ulimit`); `nofile` is `limits.openFiles`. */
export const ULIMIT_NAMES: readonly string[] = [
  "as",
  "core",
  "cpu",
  "data",
  "fsize",
  "locks",
  "memlock",
  "msgqueue",
  "nice",
  "nproc",
  "rss",
  "rtprio",
  "rttime",
  "sigpending",
  "stack",
];

function checkUlimits(ulimits: Readonly<Record<string, number>> = {}): Record<string, number> {
  for (const [name, value] of Object.entries(ulimits)) {
    if (!ULIMIT_NAMES.includes(name)) {
      throw new TypeError(
        `ulimit ${name} is not an rlimit the engine knows; use one of ${ULIMIT_NAMES.join(", ")} (the open-files limit is limits.openFiles).`,
      );
    }
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new TypeError(`ulimit ${name} must be a non-negative integer; got ${String(value)}.`);
    }
  }
  return { ...ulimits };
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
  const engine: EngineClient = createEngineClient(
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
  const report: SandboxReport = {
    user: "container",
    processes: { max: limits.processes, by: "container" },
    memoryBytes: { max: limits.memoryBytes, by: "container" },
    workspaceBytes: { max: limits.workspaceBytes, by: "tmpfs" },
    tmpBytes: { max: limits.tmpBytes, by: "tmpfs" },
    teardown: "container",
    image: options.image,
    ...(options.runtime === undefined ? {} : { runtime: options.runtime }),
  };

  const allowPrivate = checkedPatterns(options.egress?.allowPrivate);
  const probe = probeContainerNetwork(endpoint, options.runtime);
  const networkUnavailable = "reason" in probe ? probe.reason : undefined;
  if (networkUnavailable !== undefined) {
    (options.logger ?? stderrWarnings)({
      event: "warning",
      level: "warn",
      detail: `containers get no network access at all (network "none" only): ${networkUnavailable}`,
    });
  }
  const networkModes: NetworkMode[] =
    networkUnavailable === undefined ? ["none", "allow", "open"] : ["none"];
  const bridgeEndpoints: Endpoint[] = [];
  /**
   * The calls' proxy sockets: made on the first call with network, removed on close, and named by
   * the instance so that the next backend removes a crashed one's (its relays died with it).
   */
  let socketDir: string | undefined;
  /** This backend's directory (made on first use): proxy sockets, Podman's seccomp profile. */
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

  const calls = new Map<string, Call>();
  const poolSize = checkPoolSize(options.pool);
  const pool: Array<Promise<Prepared>> = [];
  let refilling = 0;
  const refills = new Set<Promise<unknown>>();
  let started = 0;
  let destroyed = 0;
  let closed = false;

  const ready = (async () => {
    sweepSocketDirs();
    const swept = sweep((owner, labels) => labels[LABELS.host] === host && !ownerAlive(owner));
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
        path: `/images/${encodeURIComponent(options.image)}/json`,
      });
    } catch (error) {
      if (EngineError.isInstance(error) && error.status === 404) {
        throw new DockerUnavailableError(DOCKER_TEXTS.noImage(options.image), { cause: error });
      }
      throw new DockerUnavailableError((error as Error).message, { cause: error });
    }
    settings.podman = ((await version).body.Components ?? []).some((c) =>
      /podman/i.test(c.Name ?? ""),
    );
    if (settings.podman) {
      // Podman reads a profile from a path only (of its machine: the engine on this one).
      const path = join(ownDir(), "seccomp.json");
      writeFileSync(path, settings.seccomp, { mode: 0o644 });
      settings.seccomp = path;
    }
    await swept;
    await probeStart();
    if (report.runtime === undefined) {
      const runtime = (await info.catch(() => undefined))?.body?.DefaultRuntime;
      if (typeof runtime === "string" && runtime !== "") report.runtime = runtime;
    }
    refill();
  })();
  // A rejection is reported by `start` and `close`; never as an unhandled rejection.
  ready.catch(() => {});

  /**
   * A container made and attached to (on Podman the attach also sets up its runtime, the slow
   * half of a start), its shell waiting for its script. Attached before the start, so not one
   * byte of output is missed.
   */
  async function prepare(): Promise<Prepared> {
    const created = await engine.json<{ Id: string }>({
      method: "POST",
      path: "/containers/create",
      body: createBody(settings),
    });
    const id = created.body.Id;
    try {
      const socket = await engine.attach(id);
      return { id, socket, reader: new FrameReader(socket) };
    } catch (error) {
      await removeContainer(id).catch(() => {});
      throw error;
    }
  }

  /**
   * One container made, attached to and started, then removed: every call needs that much, so an
   * engine that cannot (an rlimit it may not set, a runtime it lacks) is found before the first
   * call, with its reason and, where known, the fix.
   */
  async function probeStart(): Promise<void> {
    let container: Prepared | undefined;
    try {
      container = await prepare();
      await engine.json({
        method: "POST",
        path: `/containers/${container.id}/start`,
        accept: [304],
      });
      // An empty script: the shell ends at once. Removed once it has (Podman refuses to kill a
      // container that is stopping meanwhile).
      container.socket.end();
      const { reader } = container;
      const drained = (async () => {
        while ((await reader.next()) !== undefined) {}
      })();
      await Promise.race([drained, new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
    } catch (error) {
      throw new DockerUnavailableError(DOCKER_TEXTS.noStart(withFix((error as Error).message)), {
        cause: error,
      });
    } finally {
      if (container !== undefined) {
        container.socket.destroy();
        const { id } = container;
        // Left behind only if the engine refuses twice: close() sweeps this backend's own.
        await removeContainer(id).catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 500));
          await removeContainer(id).catch(() => {});
        });
      }
    }
  }

  /** The engine's reason for a failed start, with how to get past it where that is known. */
  function withFix(reason: string): string {
    if (!isNprocRefusal(reason)) return reason;
    const limit = engineProcessLimit(endpoint);
    return `${reason}. ${limit === undefined ? DOCKER_TEXTS.nprocRefusedUnknown : DOCKER_TEXTS.nprocRefused(String(limit))}`;
  }

  /** Tops the pool up to its size (each container in it serves one call, then is removed). */
  function refill(): void {
    while (!closed && pool.length + refilling < poolSize) {
      refilling++;
      const next = prepare();
      const settled = next.then(
        (container) => {
          refilling--;
          if (closed) void dropPooled(Promise.resolve(container));
          else {
            // A waiting container does not keep the process alive; its call's does.
            container.socket.unref();
            pool.push(Promise.resolve(container));
          }
        },
        () => {
          // The engine failed to make one: the next call makes its own (and refills again).
          refilling--;
        },
      );
      refills.add(settled);
      void settled.then(() => refills.delete(settled));
    }
  }

  async function dropPooled(entry: Promise<Prepared>): Promise<void> {
    const container = await entry.catch(() => undefined);
    if (container === undefined) return;
    container.socket.destroy();
    await removeContainer(container.id).catch(() => {});
  }

  /** Removes the proxy socket directories of this machine's dead docker backends. */
  function sweepSocketDirs(): void {
    for (const name of readdirSync(tmpdir())) {
      const owner = name.slice(SOCKET_DIR_PREFIX.length);
      if (name.startsWith(SOCKET_DIR_PREFIX) && isInstanceName(owner) && !ownerAlive(owner))
        rmSync(join(tmpdir(), name), { recursive: true, force: true });
    }
  }

  /** Removes the containers of this machine's bridges that `dead` says are gone. */
  async function sweep(dead: (owner: string, labels: Record<string, string>) => boolean) {
    const { body } = await engine.json<Array<{ Id: string; Labels?: Record<string, string> }>>({
      method: "GET",
      path: "/containers/json",
      query: { all: "1", filters: JSON.stringify({ label: [LABELS.owner] }) },
    });
    await Promise.all(
      (body ?? [])
        .filter((c) => {
          const owner = c.Labels?.[LABELS.owner];
          return owner !== undefined && dead(owner, c.Labels ?? {});
        })
        .map((c) => removeContainer(c.Id)),
    );
  }

  async function removeContainer(id: string): Promise<void> {
    await engine.json({
      method: "DELETE",
      path: `/containers/${id}`,
      query: { force: "1", v: "1" },
      accept: [404],
      signal: AbortSignal.timeout(REMOVE_TIMEOUT_MS),
    });
  }

  /** Removes the call's container once (it may still be being created). */
  function remove(call: Call): Promise<void> {
    call.removal ??= (async () => {
      await call.startup;
      call.socket?.destroy();
      await call.network?.close();
      if (call.id !== undefined) await removeContainer(call.id);
    })();
    return call.removal;
  }

  async function begin(spec: ExecSpec, call: Call): Promise<RunningCommand> {
    const cwd = checkCwd(spec);
    try {
      await ready;
    } catch (error) {
      throw new BackendError("sandbox_error", (error as Error).message);
    }
    if (closed) throw new BackendError("sandbox_error", DOCKER_TEXTS.closed);
    const nonce = randomBytes(8).toString("hex");
    const failed = (error: unknown) =>
      BackendError.isInstance(error)
        ? error
        : new BackendError(
            "sandbox_error",
            DOCKER_TEXTS.notStarted(withFix((error as Error).message)),
          );

    const taken = pool.shift();
    refill();
    /** Makes (or takes) a container, then starts it; the call owns it from the moment it exists. */
    const launch = async (from: Promise<Prepared>): Promise<Prepared> => {
      const container = await from;
      container.socket.ref();
      call.id = container.id;
      call.socket = container.socket;
      if (spec.signal.aborted) throw new BackendError("sandbox_error", DOCKER_TEXTS.endedEarly);
      if (container.socket.destroyed) throw new Error("its attach stream was closed");
      await engine.json({
        method: "POST",
        path: `/containers/${container.id}/start`,
        accept: [304],
      });
      return container;
    };
    let container: Prepared;
    let warm = taken !== undefined;
    try {
      container = await launch(taken ?? prepare());
    } catch (error) {
      if (!warm || BackendError.isInstance(error)) throw failed(error);
      // A pooled container that could not be made or started (the engine restarted, say): remove
      // it and make one for this call.
      warm = false;
      call.socket?.destroy();
      if (call.id !== undefined) await removeContainer(call.id).catch(() => {});
      delete call.id;
      delete call.socket;
      try {
        container = await launch(prepare());
      } catch (again) {
        throw failed(again);
      }
    }
    const { id, socket, reader } = container;
    // The container's shell waits for its script: the relay listens before the command exists.
    const proxyEnv = await startNetwork(spec, call, id);
    // A command that does not read its input ends with it unwritten: no error.
    socket.on("error", () => {});
    socket.write(callScript({ ...spec, env: { ...proxyEnv, ...spec.env } }, cwd, nonce));
    if (spec.stdin === undefined) socket.end();
    const exit = exitCode(id, reader);
    exit.catch(() => {});
    const stop = () => void remove(call).catch(() => {});
    spec.signal.addEventListener("abort", stop, { once: true });

    // The prelude's report comes first on stderr: the command runs only once it said ready.
    const early: OutputChunk[] = [];
    let report = "";
    const readyLine = readyMarker(nonce);
    const missing = missingCwdMarker(nonce);
    for (;;) {
      const chunk = await reader.next();
      if (chunk === undefined) {
        const code = await exit.catch(() => undefined);
        throw new BackendError(
          "sandbox_error",
          DOCKER_TEXTS.noShell(
            options.image,
            code,
            Buffer.concat(early.map((c) => Buffer.from(c.data)))
              .toString("utf8")
              .slice(0, 500),
          ),
        );
      }
      if (chunk.stream === "stdout") {
        early.push(chunk);
        continue;
      }
      report += Buffer.from(chunk.data).toString("latin1");
      if (
        report.length < readyLine.length &&
        (readyLine.startsWith(report) || missing.startsWith(report))
      )
        continue;
      if (report.startsWith(missing)) throw missingCwdError(cwd);
      if (report.startsWith(readyLine)) {
        // The shell has read its script: the rest of its input is the command's.
        if (spec.stdin !== undefined) socket.end(spec.stdin);
        const rest = Buffer.from(report.slice(readyLine.length), "latin1");
        if (rest.length > 0) early.push({ stream: "stderr", data: rest });
        break;
      }
      // Not the prelude's report: the image's shell said something else (it failed).
      early.push({ stream: "stderr", data: Buffer.from(report, "latin1") });
      report = "";
    }

    async function* output(): AsyncGenerator<OutputChunk> {
      try {
        yield* early;
        for (let chunk = await reader.next(); chunk !== undefined; chunk = await reader.next()) {
          yield chunk;
        }
      } finally {
        await reader.close();
      }
    }
    return { output: output(), exit, warm };
  }

  /**
   * The command's exit status. The engine's wait endpoint answers late on Podman (it polls), so
   * once the output has ended the container's state is asked at once; the wait stands in when
   * that state is not final yet (Docker may close the stream a moment before it records the exit).
   */
  function exitCode(id: string, reader: FrameReader): Promise<number> {
    const waited = engine
      .json<{ StatusCode: number }>({ method: "POST", path: `/containers/${id}/wait` })
      .then(({ body }) => body.StatusCode);
    waited.catch(() => {});
    const inspected = reader.ended.then(async () => {
      const { body } = await engine.json<{ State?: { Running?: boolean; ExitCode?: number } }>({
        method: "GET",
        path: `/containers/${id}/json`,
      });
      const state = body.State;
      return state?.Running === false && typeof state.ExitCode === "number"
        ? state.ExitCode
        : waited;
    });
    return Promise.any([inspected, waited]).catch((error: AggregateError) => {
      throw error.errors[0];
    });
  }

  /** A call with `open` or an allowlist: its proxy, and its relay inside the started container. */
  async function startNetwork(
    spec: ExecSpec,
    call: Call,
    id: string,
  ): Promise<Record<string, string>> {
    const policy = spec.network ?? "none";
    if (policy === "none") return {};
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
        socketPath: join(ownDir(), `egress-${++serial}.sock`),
        allowPrivate,
        protectedEndpoints: () => bridgeEndpoints,
      });
      return call.network.env;
    } catch (error) {
      throw new BackendError("sandbox_error", DOCKER_TEXTS.noRelay((error as Error).message));
    }
  }

  function missingCwdError(cwd: string): BackendError {
    return new BackendError("invalid_request", DOCKER_TEXTS.missingCwd(cwd), { path: ["cwd"] });
  }

  function destroy(sandboxId: string): Promise<void> {
    const call = calls.get(sandboxId);
    if (call === undefined) return Promise.resolve();
    return remove(call).then(
      () => {
        if (calls.delete(sandboxId)) destroyed++;
      },
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
    networkModes,
    networkUnavailable,
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
      return {
        sandbox: report,
        ...(poolSize === 0
          ? {}
          : { warmPool: { target: poolSize, ready: pool.length, starting: refilling } }),
      };
    },

    start(spec) {
      if (calls.has(spec.sandboxId)) {
        return Promise.reject(
          new BackendError(
            "sandbox_error",
            `Sandbox ${spec.sandboxId} already exists on this bridge; use a fresh sandbox id.`,
          ),
        );
      }
      const call: Call = { startup: Promise.resolve() };
      calls.set(spec.sandboxId, call);
      started++;
      const running = begin(spec, call);
      call.startup = running.catch(() => {});
      return running;
    },

    destroy,
    excludeFromEgress(where) {
      bridgeEndpoints.push({ host: where.host, port: where.port });
    },
    liveSandboxes: () => calls.size,
    stats: () => ({ live: calls.size, started, destroyed }),

    async close() {
      if (closed) return;
      closed = true;
      await Promise.allSettled([
        ...[...calls.keys()].map(destroy),
        ...pool.splice(0).map(dropPooled),
        ...refills,
      ]);
      // Whatever this backend made that no call knows of any more (a create whose answer was lost).
      await ready.then(() => sweep((owner) => owner === instance)).catch(() => {});
      if (socketDir !== undefined) rmSync(socketDir, { recursive: true, force: true });
      engine.close();
    },
  };
}
