// The workspace folders of the repository, from the root package.json's `workspaces`.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export const root = new URL("..", import.meta.url).pathname;

/** Workspace folders: `dir/*` entries expand to their subfolders, others are folders themselves. */
export function workspaceDirs() {
  const rootPkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  return rootPkg.workspaces.flatMap((pattern) => {
    if (!pattern.endsWith("/*")) return [join(root, pattern)];
    const parent = join(root, pattern.slice(0, -2));
    return readdirSync(parent).map((name) => join(parent, name));
  });
}
