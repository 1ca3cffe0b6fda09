import type { CallKeeperRpc } from "../src/config.js";
import type { TaskContainer } from "../src/task-container.js";
import type { TestTaskContainer } from "./fake-container.js";
import type { TestWarmPoolShard } from "./fake-warm-pool.js";

declare global {
  namespace Cloudflare {
    interface Env {
      /**
       * Bound to {@link TestTaskContainer} (the real object on a fake container), typed as the
       * Worker sees it; `fakeNamespace()` (helpers.ts) gives its test hooks.
       */
      TaskContainer: DurableObjectNamespace<TaskContainer>;
      /** The real class, in a runtime without containers (as `wrangler dev` without Docker). */
      RealTaskContainer: DurableObjectNamespace<TaskContainer>;
      /** The warm pool's shards: the real class with test hooks; its containers are fakes. */
      WarmPool: DurableObjectNamespace<TestWarmPoolShard>;
      /** The durable calls' keepers (the real class, on the fake containers). */
      CallKeeper: DurableObjectNamespace<CallKeeperRpc>;
      BRIDGE_TOKEN?: string;
    }
    interface GlobalProps {
      mainModule: typeof import("./worker-entry.js");
      durableNamespaces: "TestTaskContainer" | "TestWarmPoolShard" | "TaskContainer" | "CallKeeper";
    }
  }
}
