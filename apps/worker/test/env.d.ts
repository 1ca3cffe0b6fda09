import type { Sandbox } from "@cloudflare/sandbox";
import type { FakeSandbox } from "./fake-sandbox.js";

declare global {
  namespace Cloudflare {
    interface Env {
      /** Bound to {@link FakeSandbox} in the test config, typed as the real SDK class. */
      Sandbox: DurableObjectNamespace<Sandbox>;
      /** The same binding seen as the fake, to read what the Worker did to each sandbox. */
      RealSandbox: DurableObjectNamespace<Sandbox>;
      BRIDGE_TOKEN?: string;
    }
  }
}

declare module "*?raw" {
  const text: string;
  export default text;
}
