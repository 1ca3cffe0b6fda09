import { existsSync } from "node:fs";
import type { LocalBackend } from "@remote-task/bridge/local";
import { ConfigurationError } from "@remote-task/client";
import { expect, it } from "vitest";
import { connect, startBridgeFromFlags } from "../src/connect.js";

const servers = () => process.getActiveResourcesInfo().filter((r) => r === "TCPServerWrap").length;

/** Listening TCP servers of this process once it settles at `expected` (or after 5 s). */
async function serversSettled(expected: number): Promise<number> {
  const until = Date.now() + 5_000;
  while (servers() !== expected && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return servers();
}

it("closes the embedded bridge again when the client cannot be created", async () => {
  const before = servers();
  const error = await connect({ local: true, isolation: "none", cwd: "relative" }).catch(
    (e: unknown) => e,
  );
  expect(ConfigurationError.isInstance(error)).toBe(true);
  expect(await serversSettled(before)).toBe(before);
});

it("leaves the embedded bridge listening until the connection is closed", async () => {
  const before = servers();
  const connection = await connect({ local: true, isolation: "none" });
  expect(servers()).toBe(before + 1);
  await connection.close();
  expect(await serversSettled(before)).toBe(before);
});

it("closes the backend the embedded bridge created: its state directory is gone", async () => {
  const bridge = await startBridgeFromFlags({ isolation: "none" });
  const { stateDir } = bridge.backend as LocalBackend;
  expect(existsSync(stateDir)).toBe(true);
  await bridge.close();
  expect(existsSync(stateDir)).toBe(false);
});
