/**
 * How the repository's package.json files state versions: the published libraries give their
 * runtime dependencies ranges, so a consumer's install can share one copy with other packages;
 * the apps and every devDependency pin exact versions, and the lockfile pins what CI tests.
 */
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs script of the repository, without declarations
import { root, workspaceDirs } from "../../scripts/workspaces.mjs";

interface Manifest {
  name: string;
  private?: boolean;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

const manifests = [root, ...(workspaceDirs() as string[])].map((dir) => ({
  dir: relative(root, dir) || ".",
  pkg: JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as Manifest,
}));
const EXACT = /^\d+\.\d+\.\d+(-[\w.]+)?$/;

describe("dependency versions", () => {
  it("published libraries give their runtime dependencies and peers ranges", () => {
    const published = manifests.filter(({ pkg }) => !pkg.private);
    expect(published.map(({ dir }) => dir).sort()).toEqual([
      "packages/bridge",
      "packages/cli",
      "packages/client",
      "packages/protocol",
      "packages/tool",
    ]);
    for (const { dir, pkg } of published) {
      for (const [name, range] of Object.entries({
        ...pkg.dependencies,
        ...pkg.peerDependencies,
      })) {
        expect(range, `${dir}: ${name}`).not.toMatch(EXACT);
        expect(range, `${dir}: ${name}`).not.toMatch(/^(>=0\.0\.0|\*|latest)$/);
      }
    }
  });

  it("apps and every devDependency pin exact versions", () => {
    for (const { dir, pkg } of manifests) {
      const pinned = { ...pkg.devDependencies, ...(pkg.private ? pkg.dependencies : {}) };
      for (const [name, version] of Object.entries(pinned)) {
        expect(version, `${dir}: ${name}`).toMatch(EXACT);
      }
    }
  });
});
