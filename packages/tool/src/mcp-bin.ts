#!/usr/bin/env node
import { runMcpStdio } from "./mcp.js";

runMcpStdio().catch((error: unknown) => {
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`remote-task-mcp: ${message}\n`);
  process.exit(1);
});
