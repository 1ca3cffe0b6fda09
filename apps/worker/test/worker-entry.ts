/**
 * The Worker the tests run in workerd: the real entry (default export, the `TaskContainer` class,
 * bound as `RealTaskContainer` to check the Worker without containers, the egress gate and the
 * warm pool's shard), plus the `TaskContainer` on a fake container that the test config binds to
 * `env.TaskContainer` (its egress gate on a stand-in upstream) and the shard with test hooks bound
 * to `env.WarmPool`.
 */
export { CallKeeper, default, EgressGate, TaskContainer, WarmPoolShard } from "../src/index.js";
export { TestEgressGate, TestTaskContainer } from "./fake-container.js";
export { TestWarmPoolShard } from "./fake-warm-pool.js";
