import { readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, resolve } from "node:path";
import { expect, it } from "vitest";

const src = resolve(import.meta.dirname, "../src");
const builtins = new Set(builtinModules);

/** Every module reachable from `entry` through relative imports, with its bare imports. */
function importGraph(entry: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const visit = (file: string) => {
    if (graph.has(file)) return;
    const text = readFileSync(file, "utf8");
    const specifiers = [...text.matchAll(/(?:import|export)[^;]*?from\s+"([^"]+)"/g)].map(
      (m) => m[1] ?? "",
    );
    graph.set(
      file,
      specifiers.filter((s) => !s.startsWith(".")),
    );
    for (const s of specifiers.filter((s) => s.startsWith("."))) {
      visit(join(dirname(file), s.replace(/\.js$/, ".ts")));
    }
  };
  visit(join(src, entry));
  return graph;
}

it.each(["index.ts", "testing/index.ts"])(
  "%s imports no Node built-in (it runs in workerd)",
  (entry) => {
    const graph = importGraph(entry);
    expect(graph.size).toBeGreaterThan(3);
    for (const [file, bare] of graph) {
      const nodeOnly = bare.filter((s) => s.startsWith("node:") || builtins.has(s));
      expect(nodeOnly, file).toEqual([]);
    }
  },
);
