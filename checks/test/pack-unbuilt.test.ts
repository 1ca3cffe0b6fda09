/**
 * `npm pack` of a package whose build output is missing (an unbuilt checkout) fails and names
 * what is missing, instead of packing a package without its code; the manifest is left as it was.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const script = new URL("../../scripts/pack-manifest.mjs", import.meta.url).pathname;
let dir: string | undefined;

afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** A package like the published ones (exports into dist/, the repository's pack steps). */
function unbuiltPackage(): { folder: string; out: string; manifest: string } {
  dir = mkdtempSync(join(tmpdir(), "rt-pack-unbuilt-"));
  const folder = join(dir, "pkg");
  const out = join(dir, "out");
  mkdirSync(folder);
  mkdirSync(out);
  const manifest = `${JSON.stringify(
    {
      name: "@remote-task/example",
      version: "1.0.0",
      type: "module",
      exports: {
        ".": {
          "@remote-task/source": "./src/index.ts",
          import: { types: "./dist/index.d.ts", default: "./dist/index.js" },
        },
      },
      files: ["dist"],
      scripts: {
        prepack: `node ${JSON.stringify(script)} prepack`,
        postpack: `node ${JSON.stringify(script)} postpack`,
      },
    },
    null,
    2,
  )}\n`;
  writeFileSync(join(folder, "package.json"), manifest);
  mkdirSync(join(folder, "src"));
  writeFileSync(join(folder, "src/index.ts"), "export const a = 1;\n");
  return { folder, out, manifest };
}

function pack(folder: string, out: string) {
  return spawnSync("npm", ["pack", "--json", "--pack-destination", out], {
    cwd: folder,
    encoding: "utf8",
    env: { ...process.env, npm_config_update_notifier: "false" },
    timeout: 120_000,
  });
}

describe("npm pack of an unbuilt package", () => {
  it("fails, names the missing files and says to build, leaving the manifest alone", () => {
    const { folder, out, manifest } = unbuiltPackage();
    const run = pack(folder, out);
    expect(run.status).not.toBe(0);
    expect(run.stderr).toContain(
      "@remote-task/example: not built: ./dist, ./dist/index.d.ts, ./dist/index.js are missing. Run `npm run build` at the repository's root, then pack again.",
    );
    expect(readdirSync(out)).toEqual([]);
    expect(readFileSync(join(folder, "package.json"), "utf8")).toBe(manifest);
    expect(readdirSync(folder).sort()).toEqual(["package.json", "src"]);
  });

  it("packs once the build output is there", () => {
    const { folder, out, manifest } = unbuiltPackage();
    mkdirSync(join(folder, "dist"));
    writeFileSync(join(folder, "dist/index.js"), "export const a = 1;\n");
    writeFileSync(join(folder, "dist/index.d.ts"), "export declare const a = 1;\n");
    const run = pack(folder, out);
    expect(run.stderr).not.toContain("not built");
    expect(run.status).toBe(0);
    const files = JSON.parse(run.stdout)[0].files.map((f: { path: string }) => f.path);
    expect(files.sort()).toEqual(["LICENSE", "dist/index.d.ts", "dist/index.js", "package.json"]);
    expect(readFileSync(join(folder, "package.json"), "utf8")).toBe(manifest);
  });
});
