/**
 * The Cloudflare Worker bridge: the remote-task bridge core in front of Cloudflare containers.
 * Exports the `Sandbox` Durable Object class (the SDK's, one container per sandbox id, with the
 * internet off unless a start asks for it) and a `fetch` handler configured from the Worker's
 * bindings (see README.md).
 */
import { createWorker } from "./worker.js";

export { Sandbox } from "./sandbox-sdk.js";
export { WarmPoolShard } from "./warm-pool.js";

export default createWorker();
