import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { sharedTestOptions } from "../../vitest.shared.ts";
import { dropExpectedRuntimeLogs } from "./test/expected-runtime-logs.ts";

// Tests never need the network: no request.cf data download, no usage metrics.
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";
process.env.WRANGLER_SEND_METRICS ??= "false";
// Failures the tests cause on purpose are printed by workerd as uncaught; see that module.
dropExpectedRuntimeLogs(process.stdout);
dropExpectedRuntimeLogs(process.stderr);

/**
 * The Worker's tests run inside workerd through @cloudflare/vitest-plugin. `env.Sandbox` is bound
 * to a fake Durable Object (test/fake-sandbox.ts) because the runtime has no containers here.
 */
export default defineConfig({
  plugins: [
    cloudflareTest({
      main: "./test/worker-entry.ts",
      wrangler: { configPath: "./wrangler.jsonc", environment: "ci" },
      miniflare: {
        durableObjects: {
          Sandbox: "FakeSandbox",
          RealSandbox: "Sandbox",
        },
        bindings: { BRIDGE_TOKEN: "test-token" },
      },
    }),
  ],
  resolve: { conditions: ["@remote-task/source"] },
  ssr: { resolve: { conditions: ["@remote-task/source"] } },
  // Same reporters, JSON results file, timeouts and test glob as every other package.
  test: sharedTestOptions,
});
