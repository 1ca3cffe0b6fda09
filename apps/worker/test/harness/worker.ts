/**
 * The Worker as deployed, on this machine: the bundle `npm run build` writes (`wrangler deploy
 * --dry-run`, the code `wrangler deploy` ships) in Miniflare, configured from wrangler.jsonc, with
 * its real `TaskContainer` Durable Object whose `ctx.container` is served by workerd's container
 * client through the harness's fake Docker engine (faults on demand: slow starts, refusals), or,
 * with {@link PodmanWorkerHarness}, through the Podman shim (podman-shim.ts) as real containers.
 * Calls go over real HTTP to workerd.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HealthResponse, healthResponseSchema } from "@remote-task/protocol";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { readTaskArgv } from "../../src/task-script.ts";
import type { ContainerImage } from "./container.ts";
import { type ContainerRecord, FakeDockerEngine } from "./engine.ts";
import { commandOf } from "./exec.ts";
import {
  ensurePodman,
  type PodmanEngine,
  type PodmanShim,
  startPodmanShim,
} from "./podman-shim.ts";
import { commandName, descendants } from "./proc.ts";

const WORKER_DIR = fileURLToPath(new URL("../../", import.meta.url));
const BUNDLE = `${WORKER_DIR}dist/index.js`;
export const TOKEN = "harness-token-0123456789";
const LOG_LINES = 5_000;

export interface WorkerHarnessOptions {
  /** What the fake engine's containers run (default: {@link plainImage}). */
  image?: ContainerImage;
  /** Worker variables added to (or replacing) those of wrangler.jsonc. */
  vars?: Record<string, string>;
  /** workerd output lines kept in `logs` (default 5000; the oldest go first). */
  logLines?: number;
  /**
   * Answers the Worker's own outbound `fetch` (the egress gate's requests) instead of the
   * network, so a test can stand in for a public host (Miniflare's `outboundService`).
   */
  outbound?: ((request: Request) => Promise<Response>) | undefined;
}

/** What a warm pool shard reports of itself (`ShardStats` in src/warm-pool.ts). */
/** The image name the Worker's containers get on the fake engine (it runs any name). */
const FAKE_IMAGE_NAME = "remote-task-harness";

/** Miniflare running the built Worker against the Docker API at `socket`. */
function workerMiniflare(
  socket: string,
  imageName: string,
  storage: string,
  options: WorkerHarnessOptions,
  logs: string[],
): Miniflare {
  const kept = options.logLines ?? LOG_LINES;
  const collect = (text: string) => {
    logs.push(...text.split("\n"));
    if (logs.length > kept) logs.splice(0, logs.length - kept);
  };
  const wrangler = wranglerOptions();
  return new Miniflare(
    convertV4MiniflareOptions({
      host: "127.0.0.1",
      port: 0,
      containerEngine: { localDocker: { socketPath: socket } },
      handleStructuredLogs: ({ message }: { message: string }) => collect(message),
      // Durable Object storage on disk, so that a redeploy keeps it (as Cloudflare does).
      resourcePersistencePath: storage,
      workers: [
        {
          name: "remote-task-bridge",
          modules: true,
          scriptPath: BUNDLE,
          // Module names relative to the package, whatever the working directory.
          modulesRoot: WORKER_DIR,
          compatibilityDate: wrangler.compatibilityDate,
          compatibilityFlags: wrangler.compatibilityFlags,
          bindings: { ...wrangler.bindings, BRIDGE_TOKEN: TOKEN, ...options.vars },
          // A new version id each time Miniflare starts, as each deploy gets one.
          versionMetadata: "CF_VERSION_METADATA",
          ...(options.outbound === undefined ? {} : { outboundService: options.outbound }),
          durableObjects: {
            TaskContainer: {
              className: "TaskContainer",
              useSQLite: true,
              container: { imageName },
            },
            WarmPool: { className: "WarmPoolShard", useSQLite: true },
            CallKeeper: { className: "CallKeeper", useSQLite: true },
          },
        },
      ],
    }),
  );
}

export interface ShardReport {
  target: number;
  ready: number;
  starting: number;
  claims: number;
}

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  ms: number;
}

/**
 * The fake engine's "image" for the Worker: the host's system directories (bash, sh, coreutils,
 * util-linux), nothing else; the Worker starts it with its own PID 1.
 */
function plainImage(): ContainerImage {
  return {
    name: "plain",
    mounts: [],
    command: ["/bin/sh", "-c", "exec sleep 2147483647"],
    env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" },
  };
}

/** The calls' commands a container ran (its execs of the Worker's task script). */
export function commandsRun(record: ContainerRecord): number {
  return record.execs.filter((exec) => {
    const argv = commandOf(exec);
    return argv !== undefined && readTaskArgv(argv) !== undefined;
  }).length;
}

/** What wrangler.jsonc sets for the Worker (as `npm run build` bundles it). */
function wranglerOptions() {
  return unstable_getMiniflareWorkerOptions(`${WORKER_DIR}wrangler.jsonc`).workerOptions as {
    compatibilityDate: string;
    compatibilityFlags: string[];
    bindings: Record<string, string>;
  };
}

/** The engine a harness's containers run on: the fake one, or the Podman shim. */
type Engine = FakeDockerEngine | PodmanShim;

export class WorkerHarness<E extends Engine = FakeDockerEngine> {
  readonly engine: E;
  #mf: Miniflare;
  #url: URL;
  readonly #options: WorkerHarnessOptions;
  readonly #imageName: string;
  /** Where the Durable Objects' storage lives, kept across a redeploy. */
  readonly #storage: string;
  /** workerd's output (the bridge's JSON log lines), the oldest lines dropped first. */
  readonly logs: string[];

  private constructor(
    engine: E,
    imageName: string,
    mf: Miniflare,
    url: URL,
    options: WorkerHarnessOptions,
    storage: string,
    logs: string[],
  ) {
    this.engine = engine;
    this.#imageName = imageName;
    this.#mf = mf;
    this.#url = url;
    this.#options = options;
    this.#storage = storage;
    this.logs = logs;
  }

  get url(): URL {
    return this.#url;
  }

  /** The Worker on the fake engine (faults on demand). */
  static async start(options: WorkerHarnessOptions = {}): Promise<WorkerHarness> {
    const engine = await FakeDockerEngine.start({ image: options.image ?? plainImage() });
    return WorkerHarness.#launch(engine, FAKE_IMAGE_NAME, options);
  }

  /**
   * The Worker on real containers: Podman through the shim, the project's test image
   * (`node scripts/docker-engine.mjs ensure` starts the service and builds the image).
   */
  static async startOnPodman(
    options: WorkerHarnessOptions = {},
    engine: PodmanEngine = ensurePodman(),
  ): Promise<WorkerHarness<PodmanShim>> {
    // The shim keeps the containers' rlimits within this engine's service.
    const shim = await startPodmanShim({ engine });
    return WorkerHarness.#launch(shim, engine.image, options);
  }

  static async #launch<T extends Engine>(
    engine: T,
    imageName: string,
    options: WorkerHarnessOptions,
  ): Promise<WorkerHarness<T>> {
    const storage = await mkdtemp(join(tmpdir(), "rt-harness-storage-"));
    const logs: string[] = [];
    try {
      if (!existsSync(BUNDLE)) {
        throw new Error(`${BUNDLE} is missing: run \`npm run build -w apps/worker\` first.`);
      }
      const mf = workerMiniflare(`unix:${engine.socketPath}`, imageName, storage, options, logs);
      const url = await mf.ready;
      return new WorkerHarness(engine, imageName, mf, url, options, storage, logs);
    } catch (error) {
      await engine.close();
      await rm(storage, { recursive: true, force: true });
      throw error;
    }
  }

  /**
   * Deploys the Worker again: workerd stops and starts with a new version id (and `vars` added,
   * if given), the Durable Objects' storage and the engine's containers stay, as on Cloudflare.
   */
  async redeploy(vars?: Record<string, string>): Promise<void> {
    await this.#mf.dispose();
    this.#mf = workerMiniflare(
      `unix:${this.engine.socketPath}`,
      this.#imageName,
      this.#storage,
      { ...this.#options, vars: { ...this.#options.vars, ...vars } },
      this.logs,
    );
    this.#url = await this.#mf.ready;
  }

  /** `POST /exec` with the token; SSE when `stream` is set. Reads the whole answer. */
  async exec(
    body: Record<string, unknown>,
    options: { stream?: boolean; signal?: AbortSignal } = {},
  ): Promise<Answer> {
    const started = Date.now();
    const response = await fetch(new URL("/exec", this.url), {
      method: "POST",
      headers: {
        authorization: `Bearer ${TOKEN}`,
        "content-type": "application/json",
        ...(options.stream ? { accept: "text/event-stream" } : {}),
      },
      body: JSON.stringify(body),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, text, ms: Date.now() - started };
  }

  /** `POST /cancel`. */
  async cancel(sandboxId: string): Promise<Answer> {
    const started = Date.now();
    const response = await fetch(new URL("/cancel", this.url), {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId }),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, text, ms: Date.now() - started };
  }

  /** The hex id of the Durable Object (and so of the container) serving `sandboxId`. */
  async durableObjectId(sandboxId: string): Promise<string> {
    const namespace = await this.#mf.getDurableObjectNamespace("TaskContainer");
    return namespace.idFromName(sandboxId).toString();
  }

  /** What each warm pool shard reports of itself (its share, ready, starting, claims served). */
  async shardStats(shards: number): Promise<ShardReport[]> {
    const namespace = await this.#mf.getDurableObjectNamespace("WarmPool");
    return Promise.all(
      Array.from({ length: shards }, (_, index) => {
        const shard = namespace.get(namespace.idFromName(`warm-pool-shard-${index}`));
        return (shard as unknown as { stats(index: number): Promise<ShardReport> }).stats(index);
      }),
    );
  }

  /** Every container the fake engine created for `sandboxId`, in order. */
  async containersOf(this: WorkerHarness, sandboxId: string): Promise<ContainerRecord[]> {
    const id = await this.durableObjectId(sandboxId);
    return this.engine.records.filter((record) => record.durableObjectId === id);
  }

  /** The bridge's JSON log entries (`event: "exec"`, `destroy_failed`, ...). */
  bridgeLog(): Array<Record<string, unknown>> {
    return this.logs.flatMap((line) => {
      if (!line.startsWith('{"time"')) return [];
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
  }

  /** The workerd process running the Worker and the Durable Objects. */
  workerdPid(): number {
    const pids = descendants(process.pid).filter((pid) => commandName(pid) === "workerd");
    if (pids.length !== 1) throw new Error(`expected one workerd process, found ${pids.length}`);
    return pids[0] as number;
  }

  /** `GET /health` with the token, parsed. */
  async health(): Promise<HealthResponse> {
    const response = await fetch(new URL("/health", this.url), {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    return healthResponseSchema.parse(await response.json());
  }

  async close(): Promise<void> {
    try {
      await this.#mf.dispose();
    } finally {
      await this.engine.close();
      await rm(this.#storage, { recursive: true, force: true });
    }
  }
}
