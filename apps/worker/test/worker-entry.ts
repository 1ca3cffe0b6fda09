/**
 * The Worker the tests run in workerd: the real entry (default export and the SDK's `Sandbox`
 * class, bound as `RealSandbox` to check the Worker without containers), plus the fake
 * `Sandbox` class that the test config binds to `env.Sandbox`.
 */
export { default, Sandbox } from "../src/index.js";
export { FakeSandbox } from "./fake-sandbox.js";
