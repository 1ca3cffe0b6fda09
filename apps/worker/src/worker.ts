import {
  type BridgeHandler,
  type BridgeLogger,
  createBridge,
  errorResponse,
  jsonLineLogger,
} from "@remote-task/bridge";
import { CloudflareSandboxBackend } from "./cloudflare-backend.js";
import { ConfigError, readConfig, type WorkerEnv } from "./config.js";

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
  const bridges = new WeakMap<WorkerEnv, BridgeHandler | ConfigError>();

  function bridgeFor(env: WorkerEnv): BridgeHandler | ConfigError {
    const cached = bridges.get(env);
    if (cached !== undefined) return cached;
    let bridge: BridgeHandler | ConfigError;
    try {
      const config = readConfig(env);
      const backend = new CloudflareSandboxBackend({
        namespace: env.Sandbox,
        sleepAfter: config.sleepAfter,
      });
      bridge = createBridge({
        backend,
        logger,
        limits: config.limits,
        admission: config.admission,
        allowUnauthenticated: config.allowUnauthenticated,
        token: config.token,
        defaultCwd: config.defaultCwd,
        heartbeatIntervalMs: config.heartbeatIntervalMs,
      });
    } catch (error) {
      if (!ConfigError.isInstance(error)) throw error;
      bridge = error;
    }
    bridges.set(env, bridge);
    return bridge;
  }

  return {
    async fetch(request: Request, env: WorkerEnv, ctx: ExecutionContext): Promise<Response> {
      const bridge = bridgeFor(env);
      // Every route answers 503 `not_configured` naming the variable, never a crash.
      if (ConfigError.isInstance(bridge)) return errorResponse("not_configured", bridge.message);
      // Sandboxes are destroyed after the response is sent, without delaying it.
      return bridge.fetch(request, { waitUntil: ctx.waitUntil.bind(ctx) });
    },
  } satisfies ExportedHandler<WorkerEnv>;
}
