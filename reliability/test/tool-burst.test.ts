/**
 * An agent's parallel `remote_task` tool calls, each from a tool of its own (independent callers,
 * each with its own client), against a small bridge: refusals for capacity wait for room until
 * the call's deadline, so every call succeeds and none reaches the model as an error.
 */
import { createRemoteTaskTool } from "@remote-task/tool";
import { describe, expect, it } from "vitest";
import { startTestBridge } from "./support/bridge.js";

const CALLS = 60;

describe("parallel tool calls against a small bridge (real local backend)", () => {
  it(`${CALLS} tool executes at once, a tool each: 0 errors, each command ran once`, async () => {
    const host = await startTestBridge({ admission: { maxConcurrent: 2, maxQueued: 2 } });
    const env = {
      CLOUDFLARE_SANDBOX_URL: host.bridge.url,
      CLOUDFLARE_SANDBOX_TOKEN: host.bridge.token,
    };
    const tools = Array.from({ length: CALLS }, () => createRemoteTaskTool({ env }));
    try {
      const results = await Promise.all(
        tools.map((tool, i) =>
          tool.execute({ command: `sleep 0.05; echo task-${i}`, timeout: 60 }),
        ),
      );
      const errors = results.flatMap((r, i) => (r.isError ? [`${i}: ${r.text}`] : []));
      expect(errors).toEqual([]);
      results.forEach((r, i) => {
        expect(r.text).toBe(`task-${i}\n`);
      });
      await host.settled();
      expect(host.backend.stats()).toMatchObject({ started: CALLS, destroyed: CALLS, live: 0 });
    } finally {
      await Promise.all(tools.map((tool) => tool.close()));
      await host.close();
    }
  }, 120_000);
});
