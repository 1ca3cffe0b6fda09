import { readdir, rm } from "node:fs/promises";
import { createLocalBackend } from "@remote-task/bridge/local";
import { describe, expect, it } from "vitest";
import { skipBwrap } from "./support/isolation.js";
import { leftoverDirs, makeTmpRoot } from "./support/tmp-root.js";

const CALLS = 5;

/**
 * How long `destroy()` takes after a command exited or was stopped, per isolation mode. Reported, not
 * asserted against a number (timings are noisy here); the assertions are that every destroy
 * completes and leaves nothing behind.
 */
describe("local backend destroy latency", () => {
  for (const [isolation, ending] of [
    ["none", "exit"],
    ["bwrap", "exit"],
    ["none", "kill"],
    ["bwrap", "kill"],
  ] as const) {
    it.skipIf(isolation === "bwrap" && skipBwrap)(
      `isolation ${isolation}, command ${ending === "exit" ? "exits by itself" : "is stopped"}: ${CALLS} sequential calls`,
      async () => {
        const tmpRoot = await makeTmpRoot("rt-destroy-");
        const backend = createLocalBackend({ isolation, tmpRoot });
        const destroyMs: number[] = [];
        try {
          for (let i = 0; i < CALLS; i++) {
            const sandboxId = `destroy-${isolation}-${i}`;
            const controller = new AbortController();
            const running = await backend.start({
              sandboxId,
              command: ending === "exit" ? "echo hi" : "echo hi; sleep 30",
              cwd: "/workspace",
              env: {},
              timeoutMs: 60_000,
              signal: controller.signal,
            });
            for await (const _ of running.output) {
              // The call ends early once the command has provably started.
              if (ending === "kill") controller.abort();
            }
            const code = await running.exit;
            if (ending === "exit") expect(code).toBe(0);
            else expect(code).toBeGreaterThan(128);
            const started = performance.now();
            await backend.destroy(sandboxId);
            destroyMs.push(performance.now() - started);
          }
          expect(backend.stats()).toMatchObject({ live: 0, started: CALLS, destroyed: CALLS });
          expect(await leftoverDirs(tmpRoot)).toEqual([]);
          await backend.close();
          expect(await readdir(tmpRoot)).toEqual([]);
        } finally {
          await rm(tmpRoot, { recursive: true, force: true });
        }
        const sorted = [...destroyMs].sort((a, b) => a - b);
        console.info(
          `[destroy ${isolation} after ${ending}] median ${sorted[Math.floor(CALLS / 2)]?.toFixed(0)} ms, max ${sorted[CALLS - 1]?.toFixed(0)} ms over ${CALLS} calls`,
        );
      },
      60_000,
    );
  }
});
