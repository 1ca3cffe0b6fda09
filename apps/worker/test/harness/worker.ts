/**
 * The Worker as deployed, on this machine: the bundle `npm run build` writes (`wrangler deploy
 * --dry-run`, the code `wrangler deploy` ships) in Miniflare, configured from wrangler.jsonc, with
 * the SDK's real `Sandbox` Durable Object whose `ctx.container` is served by workerd's container
 * client through the harness's fake Docker engine. Calls go over real HTTP to workerd.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HealthResponse, healthResponseSchema } from "@remote-task/protocol";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import type { ContainerImage } from "./container.ts";
import { type ContainerRecord, FakeDockerEngine } from "./engine.ts";
import { commandName, descendants } from "./proc.ts";

const WORKER_DIR = fileURLToPath(new URL("../../", import.meta.url));
const BUNDLE = `${WORKER_DIR}dist/index.js`;
export const TOKEN = "harness-token-0123456789";
const LOG_LINES = 5_000;

export interface WorkerHarnessOptions {
  image: ContainerImage;
  /** Worker variables added to (or replacing) those of wrangler.jsonc. */
  vars?: Record<string, string>;
  /** workerd output lines kept in `logs` (default 5000; the oldest go first). */
  logLines?: number;
}

/** What a warm pool shard reports of itself (`ShardStats` in src/warm-pool.ts). */
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

/** How many commands a container was sent (the SDK's exec requests it received). */
export function commandsRun(record: ContainerRecord): number {
  return record.requests.filter(({ line }) => line.startsWith("POST /api/execute/stream ")).length;
}

/** What wrangler.jsonc sets for the Worker (as `npm run build` bundles it). */
function wranglerOptions() {
  return unstable_getMiniflareWorkerOptions(`${WORKER_DIR}wrangler.jsonc`).workerOptions as {
    compatibilityDate: string;
    compatibilityFlags: string[];
    bindings: Record<string, string>;
  };
}

export class WorkerHarness {
  readonly engine: FakeDockerEngine;
  #mf: Miniflare;
  #url: URL;
  readonly #options: WorkerHarnessOptions;
  /** Where the Durable Objects' storage lives, kept across a redeploy. */
  readonly #storage: string;
  /** workerd's output (the bridge's JSON log lines and the SDK's), last lines first dropped. */
  readonly logs: string[];

  private constructor(
    engine: FakeDockerEngine,
    mf: Miniflare,
    url: URL,
    options: WorkerHarnessOptions,
    storage: string,
    logs: string[],
  ) {
    this.engine = engine;
    this.#mf = mf;
    this.#url = url;
    this.#options = options;
    this.#storage = storage;
    this.logs = logs;
  }

  get url(): URL {
    return this.#url;
  }

  static async start(options: WorkerHarnessOptions): Promise<WorkerHarness> {
    if (!existsSync(BUNDLE)) {
      throw new Error(`${BUNDLE} is missing: run \`npm run build -w apps/worker\` first.`);
    }
    const engine = await FakeDockerEngine.start({ image: options.image });
    const storage = await mkdtemp(join(tmpdir(), "rt-harness-storage-"));
    const logs: string[] = [];
    try {
      const mf = WorkerHarness.#miniflare(engine, storage, options, logs);
      const url = await mf.ready;
      return new WorkerHarness(engine, mf, url, options, storage, logs);
    } catch (error) {
      await engine.close();
      await rm(storage, { recursive: true, force: true });
      throw error;
    }
  }

  static #miniflare(
    engine: FakeDockerEngine,
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
        containerEngine: { localDocker: { socketPath: `unix:${engine.socketPath}` } },
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
            durableObjects: {
              Sandbox: {
                className: "Sandbox",
                useSQLite: true,
                container: { imageName: "remote-task-harness" },
              },
              WarmPool: { className: "WarmPoolShard", useSQLite: true },
            },
          },
        ],
      }),
    );
  }

  /**
   * Deploys the Worker again: workerd stops and starts with a new version id (and `vars` added,
   * if given), the Durable Objects' storage and the engine's containers stay, as on Cloudflare.
   */
  async redeploy(vars?: Record<string, string>): Promise<void> {
    await this.#mf.dispose();
    this.#mf = WorkerHarness.#miniflare(
      this.engine,
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
    const namespace = await this.#mf.getDurableObjectNamespace("Sandbox");
    return namespace.idFromName(sandboxId).toString();
  }

  /**
   * Sends `path` to the `Sandbox` Durable Object `name` itself, as a request no call made: the
   * SDK forwards it to the container's server, starting the container on its own if needed.
   */
  async fetchSandbox(name: string, path: string): Promise<Response> {
    const namespace = await this.#mf.getDurableObjectNamespace("Sandbox");
    const response = await namespace
      .get(namespace.idFromName(name))
      .fetch(new URL(path, "http://sandbox.test").toString());
    return response as unknown as Response;
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

  /** Every container created for `sandboxId`, in order. */
  async containersOf(sandboxId: string): Promise<ContainerRecord[]> {
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
