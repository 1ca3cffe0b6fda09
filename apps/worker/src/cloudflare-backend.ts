/**
 * The Worker's `SandboxBackend`: runs each command in a fresh Cloudflare container (one
 * `TaskContainer` Durable Object per sandbox id, or a never-used one the warm pool lends), streams
 * its output, and destroys every container a call brought up, late starts included.
 */
import {
  BackendError,
  type BackendHealth,
  type ExecSpec,
  type RunningCommand,
  type SandboxBackend,
} from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS, raceAbort } from "@remote-task/internal";
import type { NetworkPolicy } from "@remote-task/protocol";
import {
  abortedError,
  CONTAINER_NETWORK_MODES,
  CONTAINERS_DISABLED_MESSAGE,
  type ContainerHandle,
  type ContainerNamespace,
  containerHandle,
  destroyContainer,
  isServing,
  MAX_START_MS,
  readCommand,
  sandboxError,
  startContainer,
  toBackendError,
} from "./container-client.js";
import { HedgePolicy, type HedgeSetting, hedgeName } from "./hedge.js";
import { missingCwdMarker } from "./task-script.js";
import type { WarmClaim, WarmPoolClient } from "./warm-pool-client.js";
import { withinMs } from "./within.js";

export interface CloudflareSandboxBackendOptions {
  /** The `TaskContainer` Durable Object namespace binding (`env.TaskContainer`). */
  namespace: ContainerNamespace;
  /**
   * How long after a call's deadline its container's own object destroys it, should every destroy
   * of the Worker fail (default 5 minutes); a backstop, since every container is destroyed.
   */
  backstopMs?: number | undefined;
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
  pooledNetwork?: NetworkPolicy | undefined;
  /** When a slow cold start gets a second container started for it (default: observed). */
  hedge?: HedgeSetting | undefined;
}

/** One container start of a call: the container, and its start promise. */
interface Launch {
  name: string;
  sandbox: ContainerHandle;
  started: Promise<void>;
  at: number;
}

const DEFAULT_BACKSTOP_MS = 5 * 60_000;
const DEFAULT_DESTROY_TIMEOUT_MS = 30_000;
/**
 * A container start may use the call's timeout less this much: a start that runs out is then
 * reported as a start failure before the bridge's deadline would report it as a command timeout.
 */
const START_DEADLINE_MARGIN_MS = 250;

/**
 * Where a call's sandbox is: a warm container the pool lent it, the containers started for it
 * (its own, and a hedge), or not known yet (a claim in flight).
 */
type Placement = { warm: WarmClaim } | { cold: string[] } | { claiming: true };

/**
 * Runs each command in a fresh Cloudflare container (one `TaskContainer` Durable Object per
 * sandbox id, or a never-used one from the warm pool) and streams its output, so the Worker
 * holds only what the bridge retains.
 */
export class CloudflareSandboxBackend implements SandboxBackend {
  readonly name = "cloudflare";
  readonly isolation = "container";
  readonly networkModes = CONTAINER_NETWORK_MODES;
  /** A call's secrets go to its egress gate, which puts them into headers (egress-gate.ts). */
  readonly injectsSecrets = true;
  readonly #options: CloudflareSandboxBackendOptions;

  readonly #hedging: HedgePolicy;
  /**
   * What `/health` reports of this isolate's starts: warm claims (of a ready container, or of
   * one the call waited for), pool misses, hedges.
   */
  readonly #counts = { hits: 0, waits: 0, misses: 0, hedges: 0 };

  constructor(options: CloudflareSandboxBackendOptions) {
    this.#options = options;
    this.#hedging = new HedgePolicy(options.hedge ?? { after: "observed" });
  }

  /** Container and pool calls that may still bring a sandbox's container up, per sandbox id. */
  readonly #inFlight = new Map<string, Set<Promise<unknown>>>();
  /** Where each call's sandbox is, from its start until it is destroyed. */
  readonly #placed = new Map<string, Placement>();

  async start(spec: ExecSpec): Promise<RunningCommand> {
    if (spec.signal.aborted) throw abortedError();
    const nonce = crypto.randomUUID();
    let stream: ReadableStream<Uint8Array>;
    let warm = false;
    try {
      const network = spec.network ?? "none";
      let sandbox = await this.#claimWarm(spec, network);
      if (sandbox !== undefined) {
        warm = true;
      } else {
        sandbox = await this.#startCold(spec, network);
      }
      if (spec.signal.aborted) throw abortedError();
      // The signal is not passed over RPC (an AbortSignal cannot cross it); aborting while
      // the command is being sent is handled by racing it, and `destroy()` follows in every case.
      const pending = this.#track(
        spec.sandboxId,
        sandbox.run({
          command: spec.command,
          cwd: spec.cwd,
          env: { ...spec.env },
          stdin: spec.stdin,
          nonce,
          timeoutMs: spec.timeoutMs,
          graceMs: this.#backstopMs(),
        }),
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
   * check matters because the command would otherwise fail there after the claim.
   */
  async #claimWarm(spec: ExecSpec, network: NetworkPolicy): Promise<ContainerHandle | undefined> {
    const pool = this.#options.warmPool;
    // A pooled container keeps the network it was started with: a call with another policy
    // (wider or narrower) starts its own. So does a call with secrets: a pooled container's
    // egress gate was registered without them.
    if (
      pool === undefined ||
      (spec.secrets ?? []).length > 0 ||
      !samePolicy(network, this.#options.pooledNetwork ?? "none")
    ) {
      return undefined;
    }
    this.#placed.set(spec.sandboxId, { claiming: true });
    // A start of the pool's already under way is ready about as soon as the call's own would be
    // (the first of them to finish goes to the call waiting longest); half of the call's time
    // leaves room for its own should the wait run out.
    const waitMs = Math.max(
      0,
      Math.min(MAX_START_MS, (spec.timeoutMs - START_DEADLINE_MARGIN_MS) / 2),
    );
    const claiming = this.#track(
      spec.sandboxId,
      pool.claim(spec.sandboxId, spec.timeoutMs, waitMs, spec.signal).then(
        (claim) => {
          // Recorded even when the call has ended meanwhile, so that its destroy finds it.
          if (claim !== undefined) this.#placed.set(spec.sandboxId, { warm: claim });
          return claim;
        },
        () => undefined,
      ),
    );
    const claim = await raceAbort(claiming, spec.signal, { abortError: abortedError });
    if (claim === undefined) {
      this.#counts.misses++;
      return undefined;
    }
    const sandbox = this.#sandbox(claim.name);
    const serving = this.#track(spec.sandboxId, isServing(sandbox));
    if (await raceAbort(serving, spec.signal, { abortError: abortedError })) {
      if (claim.waited) this.#counts.waits++;
      else this.#counts.hits++;
      return sandbox;
    }
    this.#counts.misses++;
    this.#placed.delete(spec.sandboxId);
    this.#track(
      spec.sandboxId,
      pool.discard(claim).catch(() => {}),
    );
    return undefined;
  }

  /**
   * Starts the call's own container before the command is sent, within the call's timeout, and
   * returns it once it runs commands, so that a container that cannot start is reported as
   * such (not as a command timeout), and a start that completes after the call ended runs nothing
   * (its object was destroyed meanwhile and refuses).
   *
   * A start still running after the hedge delay (hedge.ts) gets a second container started for
   * the call: the first of the two to be ready is returned and the other destroyed at once, before
   * anything is sent to either, so the command runs in one container only. The call fails only
   * when every container started for it failed (with the first one's error) or its time is up.
   */
  async #startCold(spec: ExecSpec, network: NetworkPolicy): Promise<ContainerHandle> {
    const names = [spec.sandboxId];
    this.#placed.set(spec.sandboxId, { cold: names });
    const budgetMs = Math.min(spec.timeoutMs - START_DEADLINE_MARGIN_MS, MAX_START_MS);
    const launch = (name: string): Launch => {
      const sandbox = this.#sandbox(name);
      const backstopMs = budgetMs + spec.timeoutMs + this.#backstopMs();
      const started = this.#track(
        spec.sandboxId,
        startContainer(sandbox, budgetMs, network, backstopMs, spec.secrets),
      );
      return { name, sandbox, started, at: Date.now() };
    };
    const coldStartOver = this.#hedging.starting();
    let hedgeOver: (() => void) | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let ended = false;
    const ready = new Promise<Launch>((resolve, reject) => {
      const launches = [launch(spec.sandboxId)];
      let failed = 0;
      let firstError: unknown;
      let hedgePending = false;
      const watch = (one: Launch) => {
        one.started.then(
          () => {
            if (ended) return;
            ended = true;
            this.#hedging.record(Date.now() - one.at);
            for (const other of launches) {
              if (other === one) continue;
              // Given up on: how long it had run is a lower bound of its start time.
              this.#hedging.record(Date.now() - other.at);
              this.#abandon(spec.sandboxId, other);
            }
            resolve(one);
          },
          (error: unknown) => {
            if (ended) return;
            failed++;
            firstError ??= error;
            // A start that failed is not hedged: the call fails once every start launched did.
            if (failed === launches.length && !hedgePending) {
              ended = true;
              reject(firstError);
            }
          },
        );
      };
      watch(launches[0] as Launch);
      const delayMs = this.#hedging.delayMs();
      if (delayMs === undefined || delayMs >= budgetMs) return;
      timer = setTimeout(async () => {
        hedgePending = true;
        hedgeOver = ended ? undefined : this.#hedging.tryHedge();
        const name = hedgeOver === undefined ? undefined : await hedgeName(spec.sandboxId);
        hedgePending = false;
        if (ended || name === undefined) {
          hedgeOver?.();
          if (!ended && failed === launches.length) {
            ended = true;
            reject(firstError);
          }
          return;
        }
        this.#counts.hedges++;
        names.push(name);
        const hedge = launch(name);
        launches.push(hedge);
        watch(hedge);
      }, delayMs);
    });
    try {
      return (
        await raceAbort(
          budgetMs > 0 ? withinMs(ready, budgetMs, () => notStartedError(spec.timeoutMs)) : ready,
          spec.signal,
          { abortError: abortedError },
        )
      ).sandbox;
    } catch (error) {
      if (BackendError.isInstance(error)) throw error;
      const mapped = toBackendError(error, spec.env);
      if (mapped.code !== "sandbox_error" || mapped.message === CONTAINERS_DISABLED_MESSAGE) {
        throw mapped;
      }
      throw sandboxError(CLOUDFLARE_TEXTS.notStarted(mapped.message), error);
    } finally {
      // Timed out or aborted: no hedge starts after the call gave up (the call's destroy
      // takes care of those started).
      ended = true;
      if (timer !== undefined) clearTimeout(timer);
      coldStartOver();
      // The hedge's slot is held while its start runs.
      if (hedgeOver !== undefined) {
        const over = hedgeOver;
        Promise.allSettled([...(this.#inFlight.get(spec.sandboxId) ?? [])]).then(over, over);
      }
    }
  }

  /**
   * Destroys a container started for a call that will not use it (the other one was ready
   * first), now and again once its start has ended, so it never outlives the call.
   */
  #abandon(sandboxId: string, launch: Launch): void {
    this.#track(
      sandboxId,
      (async () => {
        await this.#destroyNamed(launch.name).catch(() => {});
        await launch.started.catch(() => {});
        await this.#destroyNamed(launch.name);
      })().catch(() => {}),
    );
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
   * it; the container's own object then destroys it by its alarm (SANDBOX_SLEEP_AFTER after the
   * deadline), and a warm one is also destroyed by its shard once the deadline has long passed.
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
    let destroys: Array<Promise<unknown> | undefined>;
    if (placed !== undefined) {
      const names = "warm" in placed ? [placed.warm.name] : placed.cold;
      destroys = names.map((name) => this.#destroyNamed(name));
    } else {
      // An id this isolate knows nothing of (a `/cancel` that reached another isolate than its
      // call): its container is one the pool lent it, or its own (and its hedge's).
      const pool = this.#options.warmPool;
      destroys = [
        this.#destroyNamed(sandboxId),
        this.#hedging.delayMs() === undefined
          ? undefined
          : hedgeName(sandboxId).then((name) => this.#destroyNamed(name)),
        pool?.lookup(sandboxId).then((claim) => claim && this.#destroyNamed(claim.name)),
      ];
    }
    const results = await Promise.allSettled(destroys);
    const failed = results.find((result) => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  async #release(claim: WarmClaim): Promise<void> {
    // Best effort: a shard that did not hear of it destroys the container again after the
    // call's deadline, which is harmless.
    await this.#options.warmPool?.release(claim).catch(() => {});
  }

  /** One `destroy()` of a container object, bounded. */
  #destroyNamed(name: string): Promise<void> {
    return destroyContainer(this.#sandbox(name), this.#destroyTimeoutMs());
  }

  #backstopMs(): number {
    return this.#options.backstopMs ?? DEFAULT_BACKSTOP_MS;
  }

  #destroyTimeoutMs(): number {
    return this.#options.destroyTimeoutMs ?? DEFAULT_DESTROY_TIMEOUT_MS;
  }

  /**
   * The warm pool's size (all zero without a pool), and this isolate's warm claims, pool misses
   * and hedged starts since it started, for `GET /health`.
   */
  async health(): Promise<BackendHealth> {
    const pool = this.#options.warmPool;
    const size =
      pool === undefined ? { target: 0, ready: 0, starting: 0, waiting: 0 } : await pool.stats();
    return { warmPool: { ...size, ...this.#counts } };
  }

  /** Wakes every pool shard, so a pool enabled by a deploy fills before its first call. */
  async prime(): Promise<void> {
    await this.#options.warmPool?.prime();
  }

  #sandbox(name: string): ContainerHandle {
    return containerHandle(this.#options.namespace, name);
  }
}

/** Whether two network policies are the same (allowlists: the same patterns in order). */
function samePolicy(a: NetworkPolicy, b: NetworkPolicy): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function isStream(value: unknown): value is ReadableStream {
  return value instanceof ReadableStream;
}

function notStartedError(timeoutMs: number): BackendError {
  return sandboxError(CLOUDFLARE_TEXTS.notReady(timeoutMs / 1000));
}
