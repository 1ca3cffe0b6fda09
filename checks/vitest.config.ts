import { defineConfig, mergeConfig } from "vitest/config";
import { sharedTestConfig } from "../vitest.shared.ts";

export default mergeConfig(
  sharedTestConfig,
  defineConfig({ test: { testTimeout: 60_000, hookTimeout: 240_000, fileParallelism: false } }),
);
