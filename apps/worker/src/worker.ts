import {
  type BridgeHandler,
  type BridgeLogger,
  errorResponse,
  jsonLineLogger,
} from "@remote-task/bridge";
import { buildBridge } from "./bridge-setup.js";
import type { CloudflareSandboxBackend } from "./cloudflare-backend.js";
import { ConfigError, type WorkerConfig, type WorkerEnv, workerConfig } from "./config.js";
import { routeToKeeper } from "./durable-routes.js";

/** One isolate's bridge for a set of bindings, and whether it has woken the warm pool yet. */
interface Bridge {
  handler: BridgeHandler;
  backend: CloudflareSandboxBackend;
  config: WorkerConfig;
  primed: boolean;
}

export interface WorkerHandlerOptions {
  /** Receives the bridge's structured log entries (default: JSON lines on the console). */
  logger?: BridgeLogger | undefined;
}

/**
 * Builds the Worker's `fetch` handler. One bridge is kept per set of bindings, so calls in one
 * isolate share it: a `POST /cancel` reaching the isolate that runs the call stops it there;
 * anywhere else it destroys the sandbox, which ends the call too.
 */
export function createWorker(options: WorkerHandlerOptions = {}) {
  const logger = options.logger ?? jsonLineLogger;
  const bridges = new WeakMap<WorkerEnv, Bridge | ConfigError>();

  function bridgeFor(env: WorkerEnv): Bridge | ConfigError {
    const cached = bridges.get(env);
    if (cached !== undefined) return cached;
    const config = workerConfig(env);
    let bridge: Bridge | ConfigError;
    if (ConfigError.isInstance(config)) {
      bridge = config;
    } else {
      const { handler, backend } = buildBridge(env, config, logger);
      bridge = { handler, backend, config, primed: false };
    }
    bridges.set(env, bridge);
    return bridge;
  }

  return {
    async fetch(request: Request, env: WorkerEnv, ctx: ExecutionContext): Promise<Response> {
      const bridge = bridgeFor(env);
      // Every route answers 503 `not_configured` naming the variable, never a crash.
      if (ConfigError.isInstance(bridge)) return errorResponse("not_configured", bridge.message);
      if (!bridge.primed) {
        // The first request an isolate serves wakes the warm pool's shards, so a pool that a
        // deploy enabled fills before the calls that need it.
        bridge.primed = true;
        ctx.waitUntil(bridge.backend.prime().catch(() => {}));
      }
      let forward = request;
      if (bridge.config.durable !== undefined) {
        // Durable calls: each call's own Durable Object answers for it (durable-routes.ts).
        const routed = await routeToKeeper(request, env, bridge.config);
        if (routed !== undefined && "response" in routed) return routed.response;
        if (routed !== undefined) forward = routed.retry;
      }
      // Sandboxes are destroyed after the response is sent, without delaying it.
      return bridge.handler.fetch(forward, { waitUntil: ctx.waitUntil.bind(ctx) });
    },
  } satisfies ExportedHandler<WorkerEnv>;
}
