#!/usr/bin/env node
// Checked before anything loads: an older Node.js fails in the HTTP client with a bare TypeError.
import { createRequire } from "node:module";

const need = createRequire(import.meta.url)("../package.json").engines.node.replace(">=", "");
const rank = (version) => version.split(".").reduce((n, part) => n * 1000 + Number(part), 0);
if (rank(process.versions.node) < rank(need)) {
  process.stderr.write(
    `remote-task-mcp needs Node.js >= ${need}; this is Node.js ${process.versions.node}.\n`,
  );
  process.exitCode = 125;
} else {
  await import("../dist/mcp-bin.js");
}
