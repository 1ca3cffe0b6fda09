// prepack / postpack of every published package, run in the package's folder by `npm pack` and
// `npm publish`: the tarball gets the repository's LICENSE, and a package.json without the
// `@remote-task/source` export condition (the repository's own source resolution; it points at
// src/, which is not published). postpack puts the package.json back.
//
//   node ../../scripts/pack-manifest.mjs prepack|postpack
import { copyFileSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "./workspaces.mjs";

const SOURCE_CONDITION = "@remote-task/source";
const MANIFEST = "package.json";
/** The package.json as committed, while the published one is in its place. */
const KEPT = "package.json.prepack";

/** `exports` without the source condition, at any depth. */
export function withoutSourceCondition(exports) {
  if (typeof exports !== "object" || exports === null) return exports;
  return Object.fromEntries(
    Object.entries(exports)
      .filter(([key]) => key !== SOURCE_CONDITION)
      .map(([key, value]) => [key, withoutSourceCondition(value)]),
  );
}

function prepack() {
  // A pack that was interrupted left the committed manifest aside: put it back first.
  if (existsSync(KEPT)) renameSync(KEPT, MANIFEST);
  const text = readFileSync(MANIFEST, "utf8");
  const pkg = JSON.parse(text);
  if (pkg.files?.some((entry) => entry === "src" || entry.startsWith("src/"))) {
    throw new Error(`${pkg.name}: "files" lists src/, which must not be published.`);
  }
  writeFileSync(KEPT, text);
  const published = { ...pkg, exports: withoutSourceCondition(pkg.exports) };
  const leftover = JSON.stringify(published.exports ?? {}).match(/"\.\/src\/[^"]*"/);
  if (leftover) throw new Error(`${pkg.name}: an export still points into src/: ${leftover[0]}`);
  // Replaced in one step: npm processes of other packages' tasks read every workspace's
  // package.json meanwhile, and one caught half written fails with EJSONPARSE.
  writeFileSync(`${MANIFEST}.published`, `${JSON.stringify(published, null, 2)}\n`);
  renameSync(`${MANIFEST}.published`, MANIFEST);
  copyFileSync(join(root, "LICENSE"), "LICENSE");
}

function postpack() {
  if (existsSync(KEPT)) renameSync(KEPT, MANIFEST);
  rmSync("LICENSE", { force: true });
}

const step = process.argv[2];
if (step === "prepack") prepack();
else if (step === "postpack") postpack();
else if (step !== undefined) {
  console.error(`usage: node pack-manifest.mjs prepack|postpack (got ${step})`);
  process.exit(2);
}
