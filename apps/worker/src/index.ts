/**
 * The Cloudflare Worker bridge: the remote-task bridge core in front of Cloudflare containers.
 * Exports the SDK's `Sandbox` Durable Object class (one container per sandbox id) and a
 * `fetch` handler configured from the Worker's bindings (see README.md).
 */
import { createWorker } from "./worker.js";

export { Sandbox } from "./cloudflare-backend.js";
export { WarmPoolShard } from "./warm-pool.js";

export default createWorker();
