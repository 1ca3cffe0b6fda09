// Totals the vitest JSON results of every workspace package into the closing CI line.
// A package with a test script but no results file counts as one failure: a crashed run must
// never look like an empty, green one.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { countResults } from "./vitest-results.mjs";
import { workspaceDirs } from "./workspaces.mjs";

let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];

for (const pkgDir of workspaceDirs()) {
  const pkgFile = join(pkgDir, "package.json");
  if (!existsSync(pkgFile)) continue;
  const pkg = JSON.parse(readFileSync(pkgFile, "utf8"));
  if (!pkg.scripts?.test) continue;
  const resultsFile = join(pkgDir, ".vitest-results.json");
  if (!existsSync(resultsFile)) {
    failed += 1;
    rows.push(`${pkg.name}: no test results (the run crashed or never started)`);
    continue;
  }
  const counts = countResults(JSON.parse(readFileSync(resultsFile, "utf8")));
  passed += counts.passed;
  failed += counts.failed;
  skipped += counts.skipped;
  rows.push(
    `${pkg.name}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped`,
  );
}

for (const row of rows) console.log(row);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
