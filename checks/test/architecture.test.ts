/*
 * ARCHITECTURE.md names every source file of every package and app: a file added without its line
 * there fails here, and so does a name left behind for a file that is gone.
 */
import { globSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { describe, expect, it } from "vitest";

const repo = new URL("../../", import.meta.url).pathname;
const architecture = readFileSync(join(repo, "ARCHITECTURE.md"), "utf8");

/** Each package's and app's source directory, relative to the repository. */
const roots = [
  ...globSync("packages/*/src", { cwd: repo }),
  ...globSync("apps/*/src", { cwd: repo }),
].sort();

/**
 * The section of ARCHITECTURE.md's module list about `root`'s package: from its bold heading
 * (`**`packages/client`**`) to the next heading, as blocks (its bullets, or the whole paragraph).
 */
function blocksOf(root: string): string[] {
  const heading = `**\`${dirname(root)}\`**`;
  const from = architecture.indexOf(heading);
  if (from < 0) return [];
  const rest = architecture.slice(from + heading.length);
  const end = rest.search(/\n(\*\*`|## |\*\*`bench)/);
  return rest.slice(0, end < 0 ? undefined : end).split(/\n- /);
}

/**
 * Whether a block names `file` (relative to its source directory): `a/b.ts`, or `a/` and `b.ts`
 * in one block; a file at the top only outside the blocks about a directory (`- \`local/\`: ...`).
 */
function names(block: string, file: string): boolean {
  if (block.includes(`\`${file}\``)) return true;
  const dir = dirname(file);
  const name = `\`${basename(file)}\``;
  if (dir === ".") return block.includes(name) && !/^`[\w-]+\/`/.test(block.trimStart());
  return block.includes(`\`${dir}/\``) && block.includes(name);
}

describe("ARCHITECTURE.md", () => {
  it.each(roots)("names every source file of %s", (root) => {
    const blocks = blocksOf(root);
    expect(blocks.length, `no section for ${dirname(root)}`).toBeGreaterThan(0);
    const files = globSync("**/*.ts", { cwd: join(repo, root) }).sort();
    const missing = files.filter((file) => !blocks.some((block) => names(block, file)));
    expect(missing, `not named in ${dirname(root)}'s section`).toEqual([]);
  });

  it.each(roots)("names no file of %s that is gone", (root) => {
    const section = blocksOf(root).join("\n- ");
    const present = new Set(
      globSync("**/*.ts", { cwd: join(repo, root) }).map((file) => basename(file)),
    );
    const named = [...section.matchAll(/`(?:[\w-]+\/)*([\w.-]+\.ts)`/g)].map((m) => m[1] ?? "");
    expect(named.filter((name) => !present.has(name))).toEqual([]);
  });
});
