/**
 * The Worker the tests run in workerd: the real entry (default export, the SDK's `Sandbox`
 * class, bound as `RealSandbox` to check the Worker without containers, and the warm pool's
 * shard), plus the fake `Sandbox` class that the test config binds to `env.Sandbox` and the
 * shard with test hooks bound to `env.WarmPool`.
 */
export { default, Sandbox, WarmPoolShard } from "../src/index.js";
export { FakeSandbox } from "./fake-sandbox.js";
export { TestWarmPoolShard } from "./fake-warm-pool.js";
