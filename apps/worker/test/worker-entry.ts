/**
 * The Worker the tests run in workerd: the real entry, plus the fake `Sandbox` class that the
 * test config binds to `env.Sandbox`. The real SDK class stays exported (bound as
 * `RealSandbox`) to check how the Worker behaves without containers.
 */

export { Sandbox } from "../src/cloudflare-backend.js";
export { FakeSandbox } from "./fake-sandbox.js";
export default { fetch: () => new Response("placeholder") };
