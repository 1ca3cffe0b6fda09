import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

// Tests never need the network: no request.cf data download, no usage metrics.
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";
process.env.WRANGLER_SEND_METRICS ??= "false";

/**
 * The Worker's tests run inside workerd through @cloudflare/vitest-plugin. `env.Sandbox` is bound
 * to a fake Durable Object (test/fake-sandbox.ts) because the runtime has no containers here.
 * Results are written as JSON like every other package (see ../../vitest.shared.ts).
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
  test: {
    reporters: ["default", "json"],
    outputFile: { json: ".vitest-results.json" },
    testTimeout: 20_000,
    hookTimeout: 20_000,
    include: ["test/**/*.test.ts"],
  },
});
