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

// Reporters and the results file are run-wide; the timeouts and glob are per project.
const { reporters: _r, outputFile: _o, ...perProject } = sharedTestOptions;
const { include: _i, testTimeout: _t, hookTimeout: _h, ...runWide } = sharedTestOptions;

/**
 * Two projects, one results file:
 * - `workerd`: the Worker's unit tests inside workerd through @cloudflare/vitest-plugin, with
 *   `env.TaskContainer` bound to the real Durable Object on a fake container
 *   (test/fake-container.ts).
 * - `harness`: in Node, the built Worker bundle in Miniflare with its real `TaskContainer`
 *   Durable Object and workerd's container client, against the harness's Docker engines
 *   (test/harness/).
 */
export default defineConfig({
  test: {
    ...runWide,
    projects: [
      {
        plugins: [
          cloudflareTest({
            main: "./test/worker-entry.ts",
            wrangler: { configPath: "./wrangler.jsonc" },
            miniflare: {
              durableObjects: {
                TaskContainer: { className: "TestTaskContainer", useSQLite: true },
                RealTaskContainer: { className: "TaskContainer", useSQLite: true },
                WarmPool: { className: "TestWarmPoolShard", useSQLite: true },
                CallKeeper: { className: "CallKeeper", useSQLite: true },
              },
              bindings: { BRIDGE_TOKEN: "test-token-0123456789" },
            },
          }),
        ],
        resolve: { conditions: ["@remote-task/source"] },
        ssr: { resolve: { conditions: ["@remote-task/source"] } },
        test: {
          ...perProject,
          name: "workerd",
          include: ["test/*.test.ts"],
        },
      },
      {
        test: {
          name: "harness",
          environment: "node",
          include: ["test/harness/**/*.test.ts", "test/stand-in-server/**/*.test.ts"],
          // One engine, one Miniflare and their containers per file: files run one at a time.
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
