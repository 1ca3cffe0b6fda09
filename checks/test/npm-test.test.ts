import { spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const repo = new URL("../../", import.meta.url).pathname;
const TOTALS = /^\d+ passed, \d+ failed, \d+ skipped$/;

/** vitest's JSON results file as the totals script reads it. */
function results(passed: number, failed: number, skipped: number) {
  return JSON.stringify({
    numPassedTests: passed,
    numFailedTests: failed,
    numPendingTests: skipped,
    numTodoTests: 0,
    testResults: [
      {
        status: failed > 0 ? "failed" : "passed",
        assertionResults: [{ status: failed > 0 ? "failed" : "passed" }],
      },
    ],
  });
}

let fake: string | undefined;
afterEach(() => {
  if (fake) rmSync(fake, { recursive: true, force: true });
  fake = undefined;
});

/**
 * A repository with the real scripts/ and three workspaces (`a` and `b` have tests, `c` has
 * none), where `turbo` is a stand-in that writes the given results files and exits with `exit`.
 */
function fakeRepo(written: Record<string, string>, exit: number): string {
  fake = mkdtempSync(join(tmpdir(), "rt-npm-test-"));
  cpSync(join(repo, "scripts"), join(fake, "scripts"), { recursive: true });
  writeFileSync(join(fake, "package.json"), JSON.stringify({ workspaces: ["packages/*"] }));
  for (const name of ["a", "b", "c"]) {
    mkdirSync(join(fake, "packages", name), { recursive: true });
    const scripts = name === "c" ? {} : { test: "vitest run" };
    writeFileSync(join(fake, "packages", name, "package.json"), JSON.stringify({ name, scripts }));
  }
  const bin = join(fake, "bin");
  mkdirSync(bin);
  const writes = Object.entries(written)
    .map(([name, json]) => `printf '%s' '${json}' > packages/${name}/.vitest-results.json`)
    .join("\n");
  writeFileSync(join(bin, "turbo"), `#!/bin/sh\necho "turbo $*"\n${writes}\nexit ${exit}\n`);
  chmodSync(join(bin, "turbo"), 0o755);
  return fake;
}

function npmTest(dir: string) {
  const run = spawnSync(process.execPath, [join(dir, "scripts/test.mjs")], {
    cwd: dir,
    encoding: "utf8",
    env: { ...process.env, PATH: `${join(dir, "bin")}${delimiter}${process.env.PATH}` },
  });
  const lines = run.stdout.trimEnd().split("\n");
  return { status: run.status, lines, last: lines.at(-1) ?? "" };
}

describe("npm test", () => {
  it("is scripts/test.mjs", () => {
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8"));
    expect(pkg.scripts.test).toBe("node scripts/test.mjs");
  });

  it("runs every package's tests through turbo and ends with the totals line", () => {
    const dir = fakeRepo({ a: results(3, 0, 1), b: results(2, 0, 0) }, 0);
    const { status, lines, last } = npmTest(dir);
    expect(lines[0]).toBe("turbo run test --concurrency=1 --continue");
    expect(last).toMatch(TOTALS);
    expect(last).toBe("5 passed, 0 failed, 1 skipped");
    expect(status).toBe(0);
  });

  it("fails, still ending with the totals line, when a test fails", () => {
    const dir = fakeRepo({ a: results(3, 2, 0), b: results(1, 0, 0) }, 1);
    const { status, last } = npmTest(dir);
    expect(last).toBe("4 passed, 2 failed, 0 skipped");
    expect(status).not.toBe(0);
  });

  it("counts a test file whose setup failed, skipping its tests, as a failure", () => {
    const hookFailed = JSON.stringify({
      numPassedTests: 2,
      numFailedTests: 0,
      numPendingTests: 3,
      numTodoTests: 0,
      testResults: [
        { status: "passed", assertionResults: [{ status: "passed" }, { status: "passed" }] },
        { status: "failed", assertionResults: [{ status: "skipped" }, { status: "skipped" }] },
      ],
    });
    const dir = fakeRepo({ a: hookFailed, b: results(1, 0, 0) }, 1);
    const { status, last } = npmTest(dir);
    expect(last).toBe("3 passed, 1 failed, 3 skipped");
    expect(status).not.toBe(0);
  });

  it("counts a package whose run left no results as failed, never an earlier run's results", () => {
    const dir = fakeRepo({ a: results(1, 0, 0) }, 0);
    writeFileSync(join(dir, "packages/b/.vitest-results.json"), results(50, 0, 0));
    const { status, lines, last } = npmTest(dir);
    expect(existsSync(join(dir, "packages/b/.vitest-results.json"))).toBe(false);
    expect(lines).toContain("b: no test results (the run crashed or never started)");
    expect(last).toBe("1 passed, 1 failed, 0 skipped");
    expect(status).not.toBe(0);
  });
});
