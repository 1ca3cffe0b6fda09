import { existsSync, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const distDir = resolve(dirname(fileURLToPath(import.meta.url)), "../../dist");

/** Path of a built file; fails with what to do when the package has not been built. */
export function distFile(name: string): string {
  const file = resolve(distDir, name);
  if (!existsSync(file)) {
    throw new Error(
      `${file} is missing: build the package first (npm run build -w @remote-task/tool; turbo's test task does this).`,
    );
  }
  return file;
}

const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|\bimport\s+)["']([^"']+)["']/g;

/**
 * Every bare module specifier the built file loads, following its relative imports (shared
 * chunks) transitively.
 */
export function bareImports(entry: string): Set<string> {
  const seen = new Set<string>();
  const bare = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const code = readFileSync(file, "utf8");
    for (const match of code.matchAll(SPECIFIER)) {
      const specifier = match[1]!;
      if (specifier.startsWith(".")) visit(resolve(dirname(file), specifier));
      else bare.add(specifier);
    }
  };
  visit(distFile(entry));
  return bare;
}

/** The package a specifier belongs to: `@scope/name` or `name`. */
export function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}
