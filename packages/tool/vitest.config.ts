import { defineConfig, mergeConfig } from "vitest/config";
import { sharedTestConfig } from "../../vitest.shared";

export default mergeConfig(
  sharedTestConfig,
  defineConfig({
    test: {
      server: {
        deps: {
          // eventsource-parser publishes a `source` export condition pointing at .ts files; Node
          // cannot load those from node_modules, so let Vite transform it and its importers.
          inline: ["eventsource-parser", "ai", /@ai-sdk\//],
        },
      },
    },
  }),
);
