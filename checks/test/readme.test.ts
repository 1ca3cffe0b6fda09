import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PROTOCOL_VERSION } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";

const repo = new URL("../../", import.meta.url).pathname;
const cliReadme = readFileSync(join(repo, "packages/cli/README.md"), "utf8");

/** The lines of the first `sh` block after `heading`. */
function shBlockAfter(text: string, heading: string): string[] {
  const from = text.indexOf(heading);
  expect(from, heading).toBeGreaterThanOrEqual(0);
  const block = /```sh\n([\s\S]*?)```/.exec(text.slice(from));
  return (block?.[1] ?? "").trim().split("\n");
}

describe("the command line README", () => {
  it("says how to install from npm, and never that the package is not on npm", () => {
    expect(cliReadme).not.toMatch(/not on npm/i);
    expect(shBlockAfter(cliReadme, "Install from npm")[0]).toBe("npm install -g remote-task");
  });

  it("its commands for a clone of the repository work as written", () => {
    const lines = shBlockAfter(cliReadme, "From a clone of the repository");
    expect(lines[0]).toBe("npm ci && npm run build");
    // The clone is this repository, already installed and built by the test run; the alias is
    // then used as a user would.
    const script = [
      "shopt -s expand_aliases",
      ...lines.slice(1),
      "remote-task run --local -- echo through-the-alias",
    ].join("\n");
    const env: NodeJS.ProcessEnv = {};
    for (const [key, value] of Object.entries(process.env)) {
      if (!/^npm_/i.test(key) && !/CLOUDFLARE_SANDBOX|MIKAN_/.test(key)) env[key] = value;
    }
    const run = spawnSync("bash", ["-c", script], {
      cwd: repo,
      env,
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(run.stderr).toContain("3 tasks, 2 succeeded, 1 failed");
    expect(run.stdout).toMatch(/^Linux /);
    expect(run.stdout).toContain("--- [3] exit 3 (exit 3,");
    expect(run.stdout.trimEnd().endsWith("through-the-alias")).toBe(true);
    expect(run.status).toBe(0);
  });
});

describe("the package READMEs", () => {
  const LIBRARIES = ["protocol", "client", "bridge", "tool"];
  const readme = (dir: string) => readFileSync(join(repo, "packages", dir, "README.md"), "utf8");

  it("name the protocol version the package defines", () => {
    const text = readme("protocol");
    expect(text).toContain(`The wire protocol of remote-task, version ${PROTOCOL_VERSION}:`);
    expect(text).toContain(`\`PROTOCOL_VERSION\` (${PROTOCOL_VERSION})`);
  });

  // The README is packed as is: it says how to install the published package, then how to use a
  // version not released yet, and never that the package is not on npm.
  it.each(LIBRARIES)(
    "%s says how to install from npm, then from a clone for an unreleased version",
    (dir) => {
      const { name } = JSON.parse(
        readFileSync(join(repo, "packages", dir, "package.json"), "utf8"),
      );
      const text = readme(dir);
      expect(text, dir).not.toMatch(/not on npm/i);
      const install = text.indexOf(`npm install ${name}`);
      expect(install, dir).toBeGreaterThan(0);
      const clone = text.indexOf("for a version not\nreleased yet");
      expect(clone, dir).toBeGreaterThan(install);
    },
  );
});
