import { defaultServerConditions } from "vite";
import type { TestUserConfig, ViteUserConfig } from "vitest/config";

/** Reporters (with the JSON results `.ci/run` totals), timeouts and the test glob. */
export const sharedTestOptions: TestUserConfig = {
  reporters: ["default", "json"],
  outputFile: { json: ".vitest-results.json" },
  testTimeout: 20_000,
  hookTimeout: 20_000,
  include: ["test/**/*.test.ts"],
};

/**
 * Shared by every package: resolve workspace packages to their TypeScript sources (the `@remote-task/source`
 * export condition), and write machine-readable results that `.ci/run` totals.
 */
export const sharedTestConfig: ViteUserConfig = {
  resolve: { conditions: ["@remote-task/source", ...defaultServerConditions] },
  ssr: { resolve: { conditions: ["@remote-task/source", ...defaultServerConditions] } },
  test: sharedTestOptions,
};
