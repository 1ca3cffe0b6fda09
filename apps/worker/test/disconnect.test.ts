import { exports } from "cloudflare:workers";
import { expect, it } from "vitest";
import { fakeCommand } from "./fake-container.js";
import { AUTH, sandboxId, sandboxState } from "./helpers.js";

it("destroys the sandbox as soon as a JSON client disconnects", async () => {
  const id = sandboxId();
  const controller = new AbortController();
  const pending = exports.default
    .fetch("https://bridge.test/exec", {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: id, command: fakeCommand({ hang: true }) }),
      signal: controller.signal,
    })
    .catch((error: unknown) => error);
  await expect.poll(async () => (await sandboxState(id)).execs.length).toBe(1);
  controller.abort();
  await pending;
  await expect.poll(async () => (await sandboxState(id)).destroyed, { timeout: 5_000 }).toBe(true);
});
