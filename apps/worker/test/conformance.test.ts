import { listDurableObjectIds } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { backendConformanceSuite } from "@remote-task/bridge/testing";
import { CloudflareSandboxBackend } from "../src/cloudflare-backend.js";
import { fakeNamespace } from "./helpers.js";

/** Sandboxes that ran a command and were never destroyed. */
async function liveSandboxes(): Promise<number> {
  const ns = fakeNamespace();
  let live = 0;
  for (const id of await listDurableObjectIds(ns)) {
    const state = await ns.get(id).fakeState();
    if (state.execs.length > 0 && !state.destroyed) live++;
  }
  return live;
}

backendConformanceSuite(
  "cloudflare (fake Sandbox Durable Object in workerd)",
  () => new CloudflareSandboxBackend({ namespace: env.Sandbox }),
  {
    liveSandboxes,
    // The real Durable Object and container server run both in the harness (test/harness/
    // worker.test.ts: bash, and a cwd that does not exist answered 400).
    skip: {
      bash: "the fake Sandbox interprets a small vocabulary, not bash: see the harness",
      "missing-cwd": "the fake Sandbox has no file system: see the harness",
    },
  },
);
