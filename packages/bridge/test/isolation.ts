import { createLocalBackend, IsolationUnavailableError } from "../src/local/index.js";

/** Whether bubblewrap works on this machine, and why not when it does not. */
export const bwrap: { ok: boolean; reason: string } = (() => {
  try {
    createLocalBackend({ isolation: "bwrap" });
    return { ok: true, reason: "" };
  } catch (error) {
    if (IsolationUnavailableError.isInstance(error)) return { ok: false, reason: error.reason };
    throw error;
  }
})();

/** CI sets this so a missing bubblewrap fails the run instead of skipping the bwrap tests. */
export const bwrapRequired = process.env.REMOTE_TASK_REQUIRE_BWRAP === "1";

if (!bwrap.ok) {
  console.warn(
    `\n*** bubblewrap tests SKIPPED: ${bwrap.reason}${bwrapRequired ? " (REMOTE_TASK_REQUIRE_BWRAP=1: failing)" : ""} ***\n`,
  );
}

/** The isolation modes to test here: both when bubblewrap works (or is required), else `none`. */
export const isolationModes: Array<{ mode: "none" | "bwrap"; skip: boolean; title: string }> = [
  { mode: "none", skip: false, title: "isolation none" },
  {
    mode: "bwrap",
    skip: !bwrap.ok && !bwrapRequired,
    title: bwrap.ok ? "isolation bwrap" : `isolation bwrap (SKIPPED: ${bwrap.reason})`,
  },
];
