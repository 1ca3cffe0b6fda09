import { createLocalBackend, IsolationUnavailableError } from "@remote-task/bridge/local";

/** Whether bubblewrap works on this machine, and why not when it does not. */
const probe: { ok: boolean; reason: string } = (() => {
  try {
    createLocalBackend({ isolation: "bwrap" });
    return { ok: true, reason: "" };
  } catch (error) {
    if (IsolationUnavailableError.isInstance(error)) return { ok: false, reason: error.reason };
    throw error;
  }
})();

/** CI sets REMOTE_TASK_REQUIRE_BWRAP=1 so a missing bubblewrap fails the run instead of skipping. */
export const skipBwrap = !probe.ok && process.env.REMOTE_TASK_REQUIRE_BWRAP !== "1";

if (skipBwrap) console.warn(`\n*** bubblewrap tests SKIPPED: ${probe.reason} ***\n`);
