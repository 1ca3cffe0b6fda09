/**
 * One bridge for a set of bindings: the Cloudflare backend (with the warm pool and hedged starts
 * the configuration asks for) behind the bridge core, as the Worker's isolate and each durable
 * call's `CallKeeper` build it.
 */
import {
  type BridgeHandler,
  type BridgeLogger,
  createBridge,
  DEFAULT_LIMITS,
  type DurableOptions,
} from "@remote-task/bridge";
import { CloudflareSandboxBackend } from "./cloudflare-backend.js";
import { bindingReader, type WorkerConfig, type WorkerEnv } from "./config.js";
import { WarmPoolClient } from "./warm-pool-client.js";

/** What one kept call may hold beyond its command and output (its entry, its id). */
const KEPT_CALL_ROOM_BYTES = 1_024;

/**
 * What a `CallKeeper` keeps, as the bridge core takes it: one call (its keeper's), within room
 * for its command and two caps of output.
 */
function keeperDurable(config: WorkerConfig): DurableOptions | undefined {
  if (config.durable === undefined) return undefined;
  const limits = { ...DEFAULT_LIMITS, ...config.limits };
  return {
    keptSeconds: config.durable.keptSeconds,
    disconnectGraceSeconds: config.durable.disconnectGraceSeconds,
    maxKept: 1,
    maxKeptBytes: KEPT_CALL_ROOM_BYTES + limits.maxCommandBytes + 2 * limits.maxOutputBytes,
  };
}

/**
 * A bridge and its backend for `env`, configured by `config`; `instance` is the id its answers
 * report (default: random, the isolate's own).
 */
export function buildBridge(
  env: WorkerEnv,
  config: WorkerConfig,
  logger: BridgeLogger,
  instance?: string,
): { handler: BridgeHandler; backend: CloudflareSandboxBackend } {
  const backend = new CloudflareSandboxBackend({
    namespace: env.TaskContainer,
    backstopMs: config.backstopMs,
    warmPool:
      config.warmPool.target > 0 && env.WarmPool !== undefined
        ? new WarmPoolClient(env.WarmPool, config.warmPool, config.version)
        : undefined,
    pooledNetwork: config.network.default,
    hedge: config.hedge,
  });
  const handler = createBridge({
    backend,
    logger,
    limits: config.limits,
    admission: config.admission,
    allowUnauthenticated: config.allowUnauthenticated,
    token: config.token,
    defaultCwd: config.defaultCwd,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    network: config.network,
    durable: keeperDurable(config),
    // Each value is read from the Worker's bindings when a call that asks for it starts.
    secrets: config.secrets,
    readSecret: bindingReader(env),
    instance,
  });
  return { handler, backend };
}
