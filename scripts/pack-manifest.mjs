// prepack / postpack of every published package, run in the package's folder by `npm pack` and
// `npm publish`: the tarball gets the repository's LICENSE, and a package.json without what only
// makes sense inside the repository: the `@remote-task/source` export condition (it points at
// src/, which is not published), `devDependencies` (the private `@remote-task/internal`, test
// tools) and `scripts` (build, test, lint and these pack steps, all run from the repository).
// postpack puts the package.json back. A package whose `files`, `exports`, `main`, `module`,
// `types`, `typesVersions` or `bin` name a file that is not there (an unbuilt checkout: no dist/) is
// refused before anything changes, so `npm pack` and `npm publish` fail instead of shipping a
// package without its code.
//
//   node ../../scripts/pack-manifest.mjs prepack|postpack
import { copyFileSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "./workspaces.mjs";

const SOURCE_CONDITION = "@remote-task/source";
const MANIFEST = "package.json";
/** The package.json as committed, while the published one is in its place. */
const KEPT = "package.json.prepack";

/** Scripts npm runs in a consumer's install (the packages have none); every other is the repository's. */
const INSTALL_SCRIPTS = new Set(["preinstall", "install", "postinstall"]);

/** `exports` without the source condition, at any depth. */
function withoutSourceCondition(exports) {
  if (typeof exports !== "object" || exports === null) return exports;
  return Object.fromEntries(
    Object.entries(exports)
      .filter(([key]) => key !== SOURCE_CONDITION)
      .map(([key, value]) => [key, withoutSourceCondition(value)]),
  );
}

/** The manifest as published: `pkg` without the repository's condition, devDependencies and scripts. */
function publishedManifest(pkg) {
  const { devDependencies: _dev, scripts = {}, ...rest } = pkg;
  const installScripts = Object.entries(scripts).filter(([name]) => INSTALL_SCRIPTS.has(name));
  const published = { ...rest, exports: withoutSourceCondition(pkg.exports) };
  if (installScripts.length > 0) published.scripts = Object.fromEntries(installScripts);
  return published;
}

/** Every file path (`./x`) a string leaf of `value` names, wildcard patterns left out. */
function pathsIn(value) {
  if (typeof value === "string")
    return value.startsWith("./") && !value.includes("*") ? [value] : [];
  if (typeof value !== "object" || value === null) return [];
  return Object.values(value).flatMap(pathsIn);
}

/** The files the manifest points at that do not exist in the package's folder. */
function missingTargets(pkg) {
  const files = (pkg.files ?? []).map((entry) => `./${entry.replace(/^\.\//, "")}`);
  const fields = [files, pkg.exports, pkg.main, pkg.module, pkg.types, pkg.typesVersions, pkg.bin];
  const paths = fields.flatMap((field) =>
    pathsIn(typeof field === "string" && !field.startsWith("./") ? `./${field}` : field),
  );
  return [...new Set(paths)].filter((path) => !existsSync(path));
}

function prepack() {
  // A pack that was interrupted left the committed manifest aside: put it back first.
  if (existsSync(KEPT)) renameSync(KEPT, MANIFEST);
  const text = readFileSync(MANIFEST, "utf8");
  const pkg = JSON.parse(text);
  const missing = missingTargets(pkg);
  if (missing.length > 0) {
    throw new Error(
      `${pkg.name}: not built: ${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} missing. Run \`npm run build\` at the repository's root, then pack again.`,
    );
  }
  if (pkg.files?.some((entry) => entry === "src" || entry.startsWith("src/"))) {
    throw new Error(`${pkg.name}: "files" lists src/, which must not be published.`);
  }
  writeFileSync(KEPT, text);
  const published = publishedManifest(pkg);
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
