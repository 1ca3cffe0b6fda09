import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const repo = new URL("../../", import.meta.url).pathname;

/** Runs one test file of a workspace as `npm test` does and returns everything it printed. */
function vitestOutput(workspace: string, file: string): { status: number | null; output: string } {
  const run = spawnSync(
    process.execPath,
    [join(repo, "node_modules/vitest/vitest.mjs"), "run", file, "--outputFile.json=/dev/null"],
    { cwd: join(repo, workspace), encoding: "utf8", timeout: 120_000 },
  );
  return { status: run.status, output: `${run.stdout}\n${run.stderr}` };
}

describe("a passing test run looks clean", () => {
  it("has no Vite warning about the shared test config", () => {
    const { status, output } = vitestOutput("packages/protocol", "test/ids.test.ts");
    expect(status).toBe(0);
    expect(output).not.toContain("without a file extension");
    expect(output).not.toContain("(!)");
  });

  it("shows no uncaught exception for the Worker's deliberate sandbox failures", () => {
    // backend.test.ts makes the fake Sandbox fail at start, mid-stream and in destroy, and runs
    // the SDK's real Sandbox without containers.
    const { status, output } = vitestOutput("apps/worker", "test/backend.test.ts");
    expect(status).toBe(0);
    expect(output).toContain("passed");
    expect(output).not.toContain("uncaught exception");
    expect(output).not.toContain("Sourcemap for");
  });
});
