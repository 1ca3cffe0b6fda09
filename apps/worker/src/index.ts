/**
 * The Cloudflare Worker bridge: the remote-task bridge core in front of Cloudflare containers.
 * Exports the `TaskContainer` Durable Object class (one container per call, through the
 * platform's container API), the warm pool's shard, the egress gate a container's allowlist goes
 * through, the durable calls' keeper, and a `fetch` handler configured from the Worker's bindings (see README.md).
 */
import { createWorker } from "./worker.js";

export { CallKeeper } from "./call-keeper.js";
export { EgressGate } from "./egress-gate.js";
export { TaskContainer } from "./task-container.js";
export { WarmPoolShard } from "./warm-pool.js";

export default createWorker();
