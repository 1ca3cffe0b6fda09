import { chmod, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveToken } from "../src/token.js";
import { cleanEnv, runCli, testDir } from "./helpers.js";

let bridge: EmbeddedBridge;
beforeAll(async () => {
  bridge = await startEmbeddedBridge({ backend: createFakeBackend(), logger: () => {} });
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

describe("serve's --token-file", () => {
  it("is refused when group or others may read it, naming the mode and the chmod fix", async () => {
    const file = join(await testDir("rt-token-mode-"), "token");
    await writeFile(file, "file-token\n", { mode: 0o600 });
    expect(await serveToken({ tokenFile: file }, {})).toEqual({
      value: "file-token",
      from: `--token-file ${file}`,
    });
    for (const mode of [0o640, 0o604, 0o620]) {
      await chmod(file, mode);
      await expect(serveToken({ tokenFile: file }, {})).rejects.toThrow(
        `has mode 0${mode.toString(8)}: its group or other users may read it, and so may every sandbox given their uid. Make it readable by its owner only: chmod 600 ${file}`,
      );
    }
  });
});
