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
  it("marks npm install -g as the published form", () => {
    expect(cliReadme).toContain("The packages are not on npm yet.");
    expect(cliReadme).toMatch(/npm install -g remote-task +# the published form, once released/);
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

  it.each(LIBRARIES)(
    "%s says it is not on npm yet before its npm install, while unreleased",
    (dir) => {
      const { name, version } = JSON.parse(
        readFileSync(join(repo, "packages", dir, "package.json"), "utf8"),
      );
      const text = readme(dir);
      const install = text.indexOf(`npm install ${name}`);
      expect(install, dir).toBeGreaterThan(0);
      if (version === "0.0.0") {
        const note = text.indexOf("The packages are not on npm yet.");
        expect(note, dir).toBeGreaterThan(0);
        expect(note, dir).toBeLessThan(install);
      }
    },
  );
});
