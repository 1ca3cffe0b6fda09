import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import { CloudflareSandboxBackend } from "../src/cloudflare-backend.js";

it("runs pwd through the fake", async () => {
  const backend = new CloudflareSandboxBackend({ namespace: env.Sandbox });
  const running = await backend.start({
    sandboxId: "smoke-1",
    command: "pwd",
    cwd: "/workspace",
    env: {},
    timeoutMs: 5000,
    signal: new AbortController().signal,
  });
  const chunks = [];
  for await (const chunk of running.output) chunks.push(chunk);
  expect(chunks).toEqual([{ stream: "stdout", data: "/workspace\n" }]);
  expect(await running.exit).toBe(0);
  await backend.destroy("smoke-1");
});
