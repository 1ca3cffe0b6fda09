import type { Sandbox } from "@cloudflare/sandbox";
import type { FakeSandbox } from "./fake-sandbox.js";
import type { TestWarmPoolShard } from "./fake-warm-pool.js";

declare global {
  namespace Cloudflare {
    interface Env {
      /** Bound to {@link FakeSandbox} in the test config, typed as the real SDK class. */
      Sandbox: DurableObjectNamespace<Sandbox>;
      /** The SDK's own class, in a runtime without containers (as `wrangler dev` without Docker). */
      RealSandbox: DurableObjectNamespace<Sandbox>;
      /** The warm pool's shards: the real class with test hooks; its containers are fakes. */
      WarmPool: DurableObjectNamespace<TestWarmPoolShard>;
      BRIDGE_TOKEN?: string;
    }
    interface GlobalProps {
      mainModule: typeof import("./worker-entry.js");
      durableNamespaces: "FakeSandbox" | "TestWarmPoolShard";
    }
  }
}
