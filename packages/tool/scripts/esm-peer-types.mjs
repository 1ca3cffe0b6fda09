// After the CommonJS build: the CommonJS declarations of the adapters whose framework is ESM only
// (`ai`, pi-agent-core) import its types with `resolution-mode: "import"`. A CommonJS consumer's
// TypeScript (module node16 or nodenext) refuses a plain import of an ES module from a .d.cts
// (TS1479); with the attribute it reads the framework's ESM declarations. The declaration
// bundler drops attributes, so they are added here, and a declaration without the import it
// should have fails the build.
//
//   node scripts/esm-peer-types.mjs   (in packages/tool, after `tsup --env.ENTRY cjs`)
import { readFileSync, writeFileSync } from "node:fs";

/** Declaration file -> the ESM-only package whose types it imports. */
const FILES = {
  "dist/ai.d.cts": "ai",
  "dist/pi.d.cts": "@mariozechner/pi-agent-core",
};

for (const [file, name] of Object.entries(FILES)) {
  const text = readFileSync(file, "utf8");
  const escaped = name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  const pattern = new RegExp(`^import (?:type )?(.+) from '${escaped}'( with \\{.*\\})?;$`, "m");
  if (!pattern.test(text)) {
    console.error(`${file}: no import of ${name} to mark with resolution-mode "import"`);
    process.exit(1);
  }
  const fixed = text.replace(
    pattern,
    (_, clause) => `import type ${clause} from '${name}' with { "resolution-mode": "import" };`,
  );
  writeFileSync(file, fixed);
}
