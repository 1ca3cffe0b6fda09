import { type LocalBridge, startLocalBridge } from "@remote-task/bridge/node";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, runCli } from "./helpers.js";

let bridge: LocalBridge;
beforeAll(async () => {
  bridge = await startLocalBridge({ backend: createFakeBackend(), logger: () => {} });
});
afterAll(() => bridge.close());

describe("a refused token", () => {
  it("is named by where it came from: --token or the variable", async () => {
    const flag = await runCli(["health", "--url", bridge.url, "--token", "wrong"]);
    expect(flag.code).not.toBe(0);
    expect(flag.stderr).toContain("given by --token");
    expect(flag.stderr).toContain("Missing or wrong bearer token");
    expect(flag.stderr).not.toContain("..");
    const variable = await runCli(["health", "--url", bridge.url], {
      env: cleanEnv({ MIKAN_CLOUDFLARE_SANDBOX_TOKEN: "wrong" }),
    });
    expect(variable.stderr).toContain("given by MIKAN_CLOUDFLARE_SANDBOX_TOKEN");
  });
});
