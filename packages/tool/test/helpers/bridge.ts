import { EventEmitter, once } from "node:events";
import { type ExecSpec, type SandboxBackend, silentLogger } from "@remote-task/bridge";
import { createLocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { createClient, type RemoteTaskClient } from "@remote-task/client";

/**
 * The real embedded bridge over loopback with the real local backend, wrapped only to observe
 * which sandboxes start and when they are destroyed.
 */
export interface TestBridge {
  url: string;
  token: string;
  /** Environment configuring a host for this bridge. */
  env: Record<string, string>;
  client: RemoteTaskClient;
  /** Specs of every command the backend started, in order. */
  started: ExecSpec[];
  /** Sandboxes started and not yet destroyed, per the local backend. */
  live(): number;
  /** Resolves with the spec of the next command the backend starts. */
  nextStart(): Promise<ExecSpec>;
  /** Resolves once `sandboxId` has been destroyed (bounded by `timeoutMs`). */
  destroyed(sandboxId: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startTestBridge(): Promise<TestBridge> {
  const local = createLocalBackend();
  const events = new EventEmitter();
  const started: ExecSpec[] = [];
  const gone = new Set<string>();
  const backend: SandboxBackend = {
    name: local.name,
    isolation: local.isolation,
    async start(spec) {
      started.push(spec);
      events.emit("start", spec);
      return local.start(spec);
    },
    async destroy(sandboxId) {
      await local.destroy(sandboxId);
      gone.add(sandboxId);
      events.emit("destroy", sandboxId);
    },
  };
  const bridge: EmbeddedBridge = await startEmbeddedBridge({ backend, logger: silentLogger });
  const client = createClient({ url: bridge.url, token: bridge.token, retry: false });
  return {
    url: bridge.url,
    token: bridge.token,
    env: { CLOUDFLARE_SANDBOX_URL: bridge.url, CLOUDFLARE_SANDBOX_TOKEN: bridge.token },
    client,
    started,
    live: () => local.liveSandboxes(),
    async nextStart() {
      const [spec] = (await once(events, "start")) as [ExecSpec];
      return spec;
    },
    async destroyed(sandboxId, timeoutMs = 10_000) {
      if (gone.has(sandboxId)) return;
      const deadline = AbortSignal.timeout(timeoutMs);
      while (!gone.has(sandboxId)) await once(events, "destroy", { signal: deadline });
    },
    async close() {
      await client.close();
      await bridge.close();
    },
  };
}
