/**
 * The harness's in-container scripts (the relay, the stand-in server) as plain JavaScript,
 * stripped of their types once per harness process: Node's own type stripping costs about
 * 0.1 s of CPU per process started, two per container, which on a shared 2-core machine made
 * every container start cost CPU that a Cloudflare container start does not take from the Worker.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const DIR = join(tmpdir(), "rt-harness-scripts");
/** Node's type stripper, run apart so that its experimental warning stays out of test output. */
const STRIP = `process.stdout.write(require("node:module").stripTypeScriptTypes(require("node:fs").readFileSync(0, "utf8")))`;

/** The path of `source` (a TypeScript file of node: imports only) stripped to an .mjs file. */
export function strippedScript(source: string): string {
  const text = readFileSync(source, "utf8");
  const digest = createHash("sha256").update(text).digest("hex").slice(0, 16);
  const name = source.split("/").at(-1)?.replace(/\.ts$/, "") ?? "script";
  const target = join(DIR, `${name}-${digest}.mjs`);
  if (!existsSync(target)) {
    mkdirSync(DIR, { recursive: true });
    const partial = `${target}.${process.pid}.tmp`;
    const script = execFileSync(
      process.execPath,
      ["--disable-warning=ExperimentalWarning", "-e", STRIP],
      { input: text, encoding: "utf8" },
    );
    writeFileSync(partial, script);
    renameSync(partial, target);
  }
  return target;
}
