/**
 * The only module that imports `@cloudflare/sandbox`: a move to another SDK version touches
 * this file alone.
 */
import {
  ContainerUnavailableError,
  type ExecEvent,
  getSandbox,
  parseSSEStream,
  type SandboxOptions,
  Sandbox as SdkSandbox,
} from "@cloudflare/sandbox";
import {
  BackendError,
  type BackendHealth,
  type ExecSpec,
  type OutputChunk,
  type RunningCommand,
  type SandboxBackend,
} from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS, raceAbort, redact, shorten } from "@remote-task/internal";
import type { NetworkPolicy } from "@remote-task/protocol";
import type { ContainerNetwork } from "./config.js";
import { missingCwdMarker, SCRIPT_CWD, stdinPath, taskScript } from "./task-script.js";
import type { WarmClaim, WarmPoolClient } from "./warm-pool-client.js";
import { withinMs } from "./within.js";

/**
 * The SDK's `Sandbox` Durable Object, with the internet off unless a start asks for it. Every
 * start the Worker makes says which it wants (the call's network policy); a start the SDK makes
 * by itself (a request reaching a container that stopped) then gets no internet, where the SDK's
 * default would give it the internet whatever the call asked for.
 */
export class Sandbox extends SdkSandbox {
  override enableInternet: boolean | undefined = false;
}

/** The part of the SDK's sandbox stub this backend uses (typed against the real SDK). */
export type SandboxHandle = Pick<
  Sandbox,
  "startAndWaitForPorts" | "execStream" | "writeFile" | "destroy" | "getState"
>;

/** The network policies a call's container can be held to: the internet off, or on. */
export const CONTAINER_NETWORK_MODES = ["none", "open"] as const;

export interface CloudflareSandboxBackendOptions {
  /** The `Sandbox` Durable Object namespace binding (`env.Sandbox`). */
  namespace: DurableObjectNamespace<Sandbox>;
  /** Passed to `getSandbox` as `sleepAfter`; a backstop, since every sandbox is destroyed. */
  sleepAfter?: string | number | undefined;
  /**
   * Longest wait for one `destroy()` before it fails, and for a container start still in flight
   * when the call ended (default 30 s).
   */
  destroyTimeoutMs?: number | undefined;
  /** Lends each call a container started ahead of it; without it every call starts its own. */
  warmPool?: WarmPoolClient | undefined;
  /**
   * The network policy the pool's containers were started with (the deployment's default,
   * `none` if unset): only a call with this policy is lent one; any other starts its own.
   */
  pooledNetwork?: ContainerNetwork | undefined;
}

/** Extra time given to the SDK's own command timeout so the bridge's deadline always fires first. */
const SDK_TIMEOUT_GRACE_MS = 5_000;
/** What the SDK's container path sends as `Retry-After` when no instance is free. */
const DEFAULT_RETRY_AFTER_SECONDS = 10;
const DEFAULT_DESTROY_TIMEOUT_MS = 30_000;
const MAX_SDK_MESSAGE_LENGTH = 300;
/** The container server's port, which the SDK sends every command to. */
const CONTROL_PORT = 3000;
/** The SDK's own defaults for placing a container and for its server to come up. */
const MAX_INSTANCE_WAIT_MS = 30_000;
const MAX_PORT_READY_MS = 90_000;
const START_POLL_INTERVAL_MS = 300;
/**
 * A container start may use the call's timeout less this much: a start that runs out is then
 * reported as a start failure before the bridge's deadline would report it as a command timeout.
 */
const START_DEADLINE_MARGIN_MS = 250;
/** Longest wait for a warm container's state before it counts as dead. */
const STATE_TIMEOUT_MS = 5_000;

/** Lower-case fragments of the platform's messages when no container can be placed. */
const CAPACITY_SIGNATURES = [
  "there is no container instance that can be provided to this durable object",
  "there is no container instance available at this time",
  "maximum number of running container instances exceeded",
];
const CONTAINERS_DISABLED_SIGNATURE = "containers have not been enabled";

export const CONTAINERS_DISABLED_MESSAGE = CLOUDFLARE_TEXTS.containersDisabled;

/** Where a call's sandbox is: a warm container the pool lent it, its own, or not known yet (a claim in flight). */
type Placement = { warm: WarmClaim } | { cold: true } | { claiming: true };

/**
 * Runs each command in a fresh Cloudflare container (one `Sandbox` Durable Object per
 * sandbox id, or a never-used one from the warm pool) and streams its output, so the Worker
 * holds only what the bridge retains.
 */
export class CloudflareSandboxBackend implements SandboxBackend {
  readonly name = "cloudflare";
  readonly isolation = "container";
  readonly networkModes = CONTAINER_NETWORK_MODES;
  readonly #options: CloudflareSandboxBackendOptions;

  constructor(options: CloudflareSandboxBackendOptions) {
    this.#options = options;
  }

  /** SDK and pool calls that may still bring a sandbox's container up, per sandbox id. */
  readonly #inFlight = new Map<string, Set<Promise<unknown>>>();
  /** Where each call's sandbox is, from its start until it is destroyed. */
  readonly #placed = new Map<string, Placement>();

  async start(spec: ExecSpec): Promise<RunningCommand> {
    if (spec.signal.aborted) throw abortedError();
    const nonce = crypto.randomUUID();
    let stream: ReadableStream<Uint8Array>;
    let warm = false;
    try {
      const network = containerNetwork(spec.network);
      let sandbox = await this.#claimWarm(spec, network);
      if (sandbox !== undefined) {
        warm = true;
      } else {
        this.#placed.set(spec.sandboxId, { cold: true });
        sandbox = this.#sandbox(spec.sandboxId);
        await this.#startContainer(sandbox, spec, network);
      }
      if (spec.signal.aborted) throw abortedError();
      let stdinFile: string | undefined;
      if (spec.stdin !== undefined) {
        stdinFile = stdinPath(nonce);
        await this.#writeStdin(sandbox, spec, stdinFile, spec.stdin);
      }
      // The signal is not passed over RPC (an AbortSignal cannot cross it); aborting while
      // the command is being sent is handled by racing it, and `destroy()` follows in every case.
      // The command runs inside a script that enters the cwd, scrubs the environment and ends
      // with the command's shell (task-script.ts); the env values travel as the SDK's `env`.
      const pending = this.#track(
        spec.sandboxId,
        sandbox.execStream(
          taskScript({
            command: spec.command,
            cwd: spec.cwd,
            envNames: Object.keys(spec.env),
            nonce,
            stdinFile,
          }),
          {
            timeout: spec.timeoutMs + SDK_TIMEOUT_GRACE_MS,
            cwd: SCRIPT_CWD,
            env: { ...spec.env },
          },
        ),
      );
      // A stream that arrives after the abort is released at once.
      pending.then(
        (late) => {
          if (spec.signal.aborted) late.cancel().catch(() => {});
        },
        () => {},
      );
      stream = await raceAbort(pending, spec.signal, { abortError: abortedError });
    } catch (error) {
      throw toBackendError(error, spec.env);
    }
    return { ...readCommand(stream, spec, missingCwdMarker(nonce)), warm };
  }

  /**
   * Claims a warm container for the call, or `undefined` for a cold start: no pool, none ready,
   * the pool unreachable, or the one claimed found dead. A dead one is handed back to be
   * destroyed before anything was sent to it, so the command provably did not run there; the
   * check matters because the SDK would silently start a new container in its place.
   */
  async #claimWarm(spec: ExecSpec, network: ContainerNetwork): Promise<SandboxHandle | undefined> {
    const pool = this.#options.warmPool;
    // A pooled container keeps the network it was started with: a call with another policy
    // (wider or narrower) starts its own.
    if (pool === undefined || network !== (this.#options.pooledNetwork ?? "none")) {
      return undefined;
    }
    this.#placed.set(spec.sandboxId, { claiming: true });
    const claiming = this.#track(
      spec.sandboxId,
      pool.claim(spec.sandboxId, spec.timeoutMs).then(
        (claim) => {
          // Recorded even when the call has ended meanwhile, so that its destroy finds it.
          if (claim !== undefined) this.#placed.set(spec.sandboxId, { warm: claim });
          return claim;
        },
        () => undefined,
      ),
    );
    const claim = await raceAbort(claiming, spec.signal, { abortError: abortedError });
    if (claim === undefined) return undefined;
    const sandbox = this.#sandbox(claim.name);
    const serving = this.#track(spec.sandboxId, isServing(sandbox));
    if (await raceAbort(serving, spec.signal, { abortError: abortedError })) return sandbox;
    this.#placed.delete(spec.sandboxId);
    this.#track(
      spec.sandboxId,
      pool.discard(claim).catch(() => {}),
    );
    return undefined;
  }

  /**
   * Starts the container before the command is sent, within the call's timeout. Left to
   * `execStream`, a container that cannot start is retried inside the Durable Object for minutes
   * (the call would end as a command timeout although nothing ran), and a start that completes
   * after the call ended would still run the command.
   */
  async #startContainer(
    sandbox: SandboxHandle,
    spec: ExecSpec,
    network: ContainerNetwork,
  ): Promise<void> {
    const budgetMs = Math.min(
      spec.timeoutMs - START_DEADLINE_MARGIN_MS,
      MAX_INSTANCE_WAIT_MS + MAX_PORT_READY_MS,
    );
    const starting = this.#track(spec.sandboxId, startContainer(sandbox, budgetMs, network));
    try {
      await raceAbort(
        budgetMs > 0
          ? withinMs(starting, budgetMs, () => notStartedError(spec.timeoutMs))
          : starting,
        spec.signal,
        { abortError: abortedError },
      );
    } catch (error) {
      if (BackendError.isInstance(error)) throw error;
      const mapped = toBackendError(error, spec.env);
      if (mapped.code !== "sandbox_error" || mapped.message === CONTAINERS_DISABLED_MESSAGE) {
        throw mapped;
      }
      throw sandboxError(CLOUDFLARE_TEXTS.notStarted(mapped.message), error);
    }
  }

  /**
   * Writes the call's stdin to `path` in the container (outside /workspace; the task script opens
   * it and removes it before the command starts). The SDK's exec has no stdin, and its file API
   * takes bytes as base64 text.
   */
  async #writeStdin(
    sandbox: SandboxHandle,
    spec: ExecSpec,
    path: string,
    stdin: Uint8Array,
  ): Promise<void> {
    const writing = this.#track(
      spec.sandboxId,
      sandbox.writeFile(path, base64Of(stdin), { encoding: "base64" }),
    );
    try {
      await raceAbort(writing, spec.signal, { abortError: abortedError });
    } catch (error) {
      if (BackendError.isInstance(error)) throw error;
      const mapped = toBackendError(error, spec.env);
      if (mapped.code !== "sandbox_error") throw mapped;
      throw sandboxError(CLOUDFLARE_TEXTS.stdinNotWritten(mapped.message), error);
    }
  }

  /** Remembers `promise` as in flight for `sandboxId` until it settles. */
  #track<T>(sandboxId: string, promise: Promise<T>): Promise<T> {
    let pending = this.#inFlight.get(sandboxId);
    if (pending === undefined) {
      pending = new Set();
      this.#inFlight.set(sandboxId, pending);
    }
    const set = pending;
    set.add(promise);
    const forget = () => {
      set.delete(promise);
      if (set.size === 0 && this.#inFlight.get(sandboxId) === set) this.#inFlight.delete(sandboxId);
    };
    promise.then(forget, forget);
    return promise;
  }

  /**
   * Destroys the sandbox. A start or command still in flight for it (the call ended while the
   * container was starting) could bring the container back afterwards: it is awaited, a stream
   * it produced is cancelled, and the sandbox destroyed again, so no container outlives its call.
   * A warm container is then handed back to its pool shard, which forgets it (it is never lent
   * twice). A failure (or a destroy stuck past `destroyTimeoutMs`) rejects, and the bridge logs
   * it; the container then stops by itself once its `sleepAfter` expires, and a warm one is also
   * destroyed by its shard once the call's deadline has long passed.
   */
  async destroy(sandboxId: string): Promise<void> {
    try {
      await this.#destroyAfterLateStarts(sandboxId);
    } catch (error) {
      this.#placed.delete(sandboxId);
      throw error;
    }
    const placed = this.#placed.get(sandboxId);
    this.#placed.delete(sandboxId);
    if (placed !== undefined && "warm" in placed) await this.#release(placed.warm);
  }

  async #destroyAfterLateStarts(sandboxId: string): Promise<void> {
    const late = this.#inFlight.get(sandboxId);
    if (late === undefined) return this.#destroyOnce(sandboxId);
    // A second destroy follows in every case, so a failure of the first is not the last word.
    await this.#destroyOnce(sandboxId).catch(() => {});
    const timeoutMs = this.#destroyTimeoutMs();
    let stillStarting: unknown;
    const results = await withinMs(Promise.allSettled([...late]), timeoutMs, () =>
      sandboxError(`A container start was still running ${timeoutMs} ms after the call ended.`),
    ).catch((error: unknown) => {
      stillStarting = error;
      return [];
    });
    for (const result of results) {
      if (result.status === "fulfilled" && isStream(result.value)) {
        result.value.cancel().catch(() => {});
      }
    }
    await this.#destroyOnce(sandboxId);
    if (stillStarting !== undefined) throw stillStarting;
  }

  /** Destroys the container `sandboxId` runs in, wherever it is. */
  async #destroyOnce(sandboxId: string): Promise<void> {
    const placed = this.#placed.get(sandboxId);
    // A claim still in flight: nothing to destroy yet (the destroy after it settles finds it).
    if (placed !== undefined && "claiming" in placed) return;
    if (placed !== undefined) {
      return this.#destroyNamed("warm" in placed ? placed.warm.name : sandboxId);
    }
    // An id this isolate knows nothing of (a `/cancel` that reached another isolate than its
    // call): its container is either one the pool lent it, or its own.
    const pool = this.#options.warmPool;
    const results = await Promise.allSettled([
      this.#destroyNamed(sandboxId),
      pool?.lookup(sandboxId).then((claim) => claim && this.#destroyNamed(claim.name)),
    ]);
    const failed = results.find((result) => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  async #release(claim: WarmClaim): Promise<void> {
    // Best effort: a shard that did not hear of it destroys the container again after the
    // call's deadline, which is harmless.
    await this.#options.warmPool?.release(claim).catch(() => {});
  }

  /** One `destroy()` of the SDK, bounded: it coalesces destroys but never bounds them. */
  #destroyNamed(name: string): Promise<void> {
    return destroySandbox(this.#sandbox(name), this.#destroyTimeoutMs());
  }

  #destroyTimeoutMs(): number {
    return this.#options.destroyTimeoutMs ?? DEFAULT_DESTROY_TIMEOUT_MS;
  }

  /** The warm pool's size, for `GET /health` (all zero without a pool). */
  async health(): Promise<BackendHealth> {
    const pool = this.#options.warmPool;
    return {
      warmPool: pool === undefined ? { target: 0, ready: 0, starting: 0 } : await pool.stats(),
    };
  }

  /** Wakes every pool shard, so a pool enabled by a deploy fills before its first call. */
  async prime(): Promise<void> {
    await this.#options.warmPool?.prime();
  }

  #sandbox(name: string): SandboxHandle {
    return sandboxHandle(this.#options.namespace, name, this.#options.sleepAfter);
  }
}

/** The SDK's stub for the sandbox `name`, configured for one sessionless command. */
function sandboxHandle(
  namespace: DurableObjectNamespace<Sandbox>,
  name: string,
  sleepAfter: string | number | undefined,
): SandboxHandle {
  const options: SandboxOptions = {
    // Ids are already lowercase-valid (protocol schema, or the pool's own names), so no
    // normalisation is needed and the Durable Object key is exactly the name given.
    normalizeId: false,
    // One command per sandbox: run it as a fresh process rather than in a shared shell
    // session, so `exit 3` is an exit code and not a terminated session.
    enableDefaultSession: false,
  };
  if (sleepAfter !== undefined) options.sleepAfter = sleepAfter;
  return getSandbox(singleUse(namespace), name, options);
}

/**
 * The container network a call's policy maps onto: `none` has the internet off, `open` on. The
 * bridge refuses every other policy (the backend's `networkModes`) before a call starts.
 */
function containerNetwork(policy: NetworkPolicy | undefined): ContainerNetwork {
  if (policy === undefined || policy === "none") return "none";
  if (policy === "open") return "open";
  throw sandboxError(CLOUDFLARE_TEXTS.allowlistUnsupported);
}

/**
 * Starts the sandbox's container on the control port with the internet on or off as `network`
 * says; `budgetMs` bounds placement and readiness.
 */
function startContainer(
  sandbox: SandboxHandle,
  budgetMs: number,
  network: ContainerNetwork,
): Promise<void> {
  return sandbox.startAndWaitForPorts({
    ports: CONTROL_PORT,
    startOptions: { enableInternet: network === "open" },
    cancellationOptions: {
      // Half the budget for placement, so that "no instance" is reported (capacity) while
      // the call can still answer it.
      instanceGetTimeoutMS: Math.max(
        START_POLL_INTERVAL_MS,
        Math.min(MAX_INSTANCE_WAIT_MS, budgetMs / 2),
      ),
      portReadyTimeoutMS: Math.max(START_POLL_INTERVAL_MS, budgetMs),
      waitInterval: START_POLL_INTERVAL_MS,
    },
  });
}

/** Whether the sandbox's container is up and its server answered (the SDK's `healthy`). */
async function isServing(sandbox: SandboxHandle): Promise<boolean> {
  try {
    const state = await withinMs(sandbox.getState(), STATE_TIMEOUT_MS, () => new Error("getState"));
    return state.status === "healthy";
  } catch {
    return false;
  }
}

/** One `destroy()` of the SDK, bounded: it coalesces destroys but never bounds them. */
function destroySandbox(sandbox: SandboxHandle, timeoutMs: number): Promise<void> {
  // A stuck control plane must not keep the Worker's `waitUntil` alive forever.
  return withinMs(
    sandbox.destroy(),
    timeoutMs,
    () => new Error(`destroy() did not finish within ${timeoutMs} ms`),
  );
}

/**
 * Starts the container of the pool's sandbox `name` with the `network` policy and waits until its
 * server answers, within `budgetMs` (for the warm pool's shards). `sleepAfterSeconds` ends it
 * should the pool lose track.
 */
export function startPooledContainer(
  namespace: DurableObjectNamespace<Sandbox>,
  name: string,
  sleepAfterSeconds: number,
  budgetMs: number,
  network: ContainerNetwork,
): Promise<void> {
  return withinMs(
    startContainer(sandboxHandle(namespace, name, sleepAfterSeconds), budgetMs, network),
    budgetMs,
    () => new Error(`the container was not ready within ${budgetMs / 1000} s`),
  );
}

/** Destroys the pool's sandbox `name`, bounded by `timeoutMs`. */
export function destroyPooledContainer(
  namespace: DurableObjectNamespace<Sandbox>,
  name: string,
  timeoutMs: number,
): Promise<void> {
  return destroySandbox(sandboxHandle(namespace, name, undefined), timeoutMs);
}

/**
 * A fresh view of the namespace for one `getSandbox` call. The SDK remembers each id's
 * configuration per namespace object for the life of the isolate; with a new id per call that
 * memory would only grow, so each call gets its own short-lived key instead.
 */
function singleUse(namespace: DurableObjectNamespace<Sandbox>): DurableObjectNamespace<Sandbox> {
  const view: Pick<DurableObjectNamespace<Sandbox>, "idFromName" | "get"> = {
    idFromName: (name) => namespace.idFromName(name),
    get: (id, options) => namespace.get(id, options),
  };
  return view as DurableObjectNamespace<Sandbox>;
}

/**
 * Turns the SDK's SSE stream into the bridge's output iterable and exit promise. `cwdMissing` is
 * what the task script prints, before any output, when it cannot enter the cwd.
 */
function readCommand(
  stream: ReadableStream<Uint8Array>,
  spec: ExecSpec,
  cwdMissing: string,
): RunningCommand {
  let settled = false;
  let settle!: (outcome: { code: number } | { error: unknown }) => void;
  const exit = new Promise<number>((resolve, reject) => {
    settle = (outcome) => {
      if (settled) return;
      settled = true;
      if ("code" in outcome) resolve(outcome.code);
      else reject(outcome.error);
    };
  });
  // The bridge may stop listening after an abort; a late rejection must not go unhandled.
  exit.catch(() => {});

  async function* output(): AsyncGenerator<OutputChunk> {
    try {
      let first = true;
      for await (const event of parseSSEStream<ExecEvent>(stream, spec.signal)) {
        if (event.type === "stdout" || event.type === "stderr") {
          if (first && event.type === "stderr" && event.data === cwdMissing) {
            settle({ error: missingCwdError(spec.cwd) });
            return;
          }
          first = false;
          if (event.data) yield { stream: event.type, data: event.data };
        } else if (event.type === "complete") {
          const code = event.exitCode ?? event.result?.exitCode;
          if (typeof code === "number" && Number.isInteger(code)) settle({ code });
          else settle({ error: sandboxError(CLOUDFLARE_TEXTS.noExitCode) });
          return;
        } else if (event.type === "error") {
          const reason = event.error ?? event.data ?? "the command could not be run";
          settle({
            error: sandboxError(CLOUDFLARE_TEXTS.failed(undefined, safeText(reason, spec.env))),
          });
          return;
        }
      }
      settle({
        error: spec.signal.aborted ? abortedError() : sandboxError(CLOUDFLARE_TEXTS.closedEarly),
      });
    } catch (error) {
      settle({ error: spec.signal.aborted ? abortedError() : brokenStreamError(error, spec.env) });
    } finally {
      // Reached early when the reader stops (abort or a consumer that breaks out).
      if (!settled) settle({ error: abortedError() });
      stream.cancel().catch(() => {});
    }
  }

  return { output: output(), exit };
}

function base64Of(bytes: Uint8Array): string {
  let binary = "";
  // In slices: spreading a whole MiB into one call would overflow the stack.
  for (let at = 0; at < bytes.length; at += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  }
  return btoa(binary);
}

function isStream(value: unknown): value is ReadableStream {
  return value instanceof ReadableStream;
}

function notStartedError(timeoutMs: number): BackendError {
  return sandboxError(CLOUDFLARE_TEXTS.notReady(timeoutMs / 1000));
}

function missingCwdError(cwd: string): BackendError {
  return new BackendError("invalid_request", CLOUDFLARE_TEXTS.missingCwd(cwd.slice(0, 200)), {
    path: ["cwd"],
  });
}

/** The output stream failed mid-command: the SDK's words say how, not what it means. */
function brokenStreamError(error: unknown, env: Readonly<Record<string, string>>): BackendError {
  const mapped = toBackendError(error, env);
  if (mapped.code !== "sandbox_error") return mapped;
  return sandboxError(CLOUDFLARE_TEXTS.brokenStream(mapped.message), error);
}

function abortedError(): BackendError {
  return sandboxError(CLOUDFLARE_TEXTS.stopped);
}

function sandboxError(message: string, cause?: unknown): BackendError {
  return new BackendError("sandbox_error", message, cause === undefined ? {} : { cause });
}

/**
 * Maps anything the SDK throws to a `BackendError` whose message is safe to show: capacity
 * problems become `capacity_exceeded` (retryable), everything else `sandbox_error`.
 * Errors cross the Durable Object RPC boundary as plain errors, so classes are matched by
 * name, code and the platform's message as well as by `instanceof`.
 */
export function toBackendError(error: unknown, env: Readonly<Record<string, string>> = {}) {
  if (BackendError.isInstance(error)) return error;
  const message = messageOf(error);
  const lower = message.toLowerCase();
  if (isCapacityError(error, lower)) {
    return new BackendError("capacity_exceeded", CLOUDFLARE_TEXTS.noContainer, {
      retryAfterSeconds: retryAfterSeconds(error),
      cause: error,
    });
  }
  if (lower.includes(CONTAINERS_DISABLED_SIGNATURE)) {
    return sandboxError(CONTAINERS_DISABLED_MESSAGE, error);
  }
  return sandboxError(CLOUDFLARE_TEXTS.failed(sdkCode(error), safeText(message, env)), error);
}

function isCapacityError(error: unknown, lowerMessage: string): boolean {
  if (error instanceof ContainerUnavailableError) return true;
  if (isRecord(error)) {
    if (error.name === "ContainerUnavailableError") return true;
    if (sdkCode(error) === "CONTAINER_UNAVAILABLE") return true;
  }
  return CAPACITY_SIGNATURES.some((signature) => lowerMessage.includes(signature));
}

function retryAfterSeconds(error: unknown): number {
  const ms =
    error instanceof ContainerUnavailableError
      ? error.retryAfterMs
      : isRecord(error) && isRecord(error.context)
        ? error.context.retryAfterMs
        : undefined;
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0
    ? Math.ceil(ms / 1000)
    : DEFAULT_RETRY_AFTER_SECONDS;
}

function sdkCode(error: unknown): string | undefined {
  if (!isRecord(error)) return undefined;
  const code = error.code;
  return typeof code === "string" && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

function messageOf(error: unknown): string {
  if (isRecord(error) && typeof error.message === "string") return error.message;
  return typeof error === "string" ? error : "";
}

/** Shortens an SDK message and removes any env value the caller sent. */
function safeText(text: string, env: Readonly<Record<string, string>>): string {
  return shorten(redact(text, Object.values(env)), MAX_SDK_MESSAGE_LENGTH);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
