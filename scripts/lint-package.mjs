// `npm run lint` of a published package, run in its folder: packs it as `npm publish` would
// (so the prepack step runs), then checks that tarball with publint and with attw in every
// module resolution, node10 included.
//
//   node ../../scripts/lint-package.mjs [--no-attw] [--esm-only <subpath>]...
// `--esm-only ./testing` checks that entry point without the CommonJS resolution it lacks on
// purpose; `--no-attw` for a package without importable entry points (the command line).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    attw: { type: "boolean", default: true },
    "esm-only": { type: "string", multiple: true },
  },
  allowNegative: true,
});
const esmOnly = values["esm-only"] ?? [];

const run = (command, args) => execFileSync(command, args, { stdio: "inherit" });

const dir = mkdtempSync(join(tmpdir(), "rt-lint-"));
try {
  const packed = execFileSync("npm", ["pack", "--json", "--pack-destination", dir], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  const tarball = join(dir, JSON.parse(packed)[0].filename);
  run("publint", ["--strict", tarball]);
  if (values.attw) {
    const excluded = esmOnly.length > 0 ? ["--exclude-entrypoints", ...esmOnly] : [];
    run("attw", [tarball, ...excluded]);
    for (const entry of esmOnly)
      run("attw", [tarball, "--entrypoints", entry, "--profile", "esm-only"]);
  }
} catch (error) {
  process.exitCode = error.status ?? 1;
  if (error.status === undefined) console.error(error.message);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
