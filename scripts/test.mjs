// `npm test`: every workspace's tests through turbo, one package at a time, then the totals line
// "N passed, N failed, N skipped" from their vitest results. For one package's tests alone:
// `npm test -w <package>`.
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { root, workspaceDirs } from "./workspaces.mjs";

// Results of an earlier run must not be counted for a package that does not run this time.
for (const dir of workspaceDirs()) rmSync(join(dir, ".vitest-results.json"), { force: true });

const turbo = spawnSync("turbo", ["run", "test", "--concurrency=1", "--continue"], {
  cwd: root,
  stdio: "inherit",
});
if (turbo.error) console.error(`could not start turbo: ${turbo.error.message}`);
const totals = spawnSync(process.execPath, [join(root, "scripts/test-summary.mjs")], {
  cwd: root,
  stdio: "inherit",
});
process.exit(turbo.status !== 0 ? (turbo.status ?? 1) : (totals.status ?? 1));
