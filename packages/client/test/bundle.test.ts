/**
 * The client bundles for a browser, a neutral platform and a Worker (workerd's conditions) when
 * it is given `fetch`: no Node built-in is imported and undici is not in the bundle. Each bundle is
 * then run by Node from a directory where undici cannot be found, as in a Worker: with `fetch` a
 * call works; without it the call fails as a configuration error that says nothing was sent.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { build, type Platform } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";

const entry = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

const TARGETS: Array<{ name: string; platform: Platform; conditions: string[] }> = [
  { name: "browser", platform: "browser", conditions: [] },
  { name: "neutral", platform: "neutral", conditions: ["import"] },
  { name: "worker", platform: "neutral", conditions: ["workerd", "worker", "browser", "import"] },
];

/** Uses the bundle the way a Worker would, and prints what happened as JSON. */
const PROGRAM = `
import { createClient } from "./bundle.mjs";
const fetch = async () =>
  new Response(JSON.stringify({ stdout: "hi\\n", stderr: "", code: 0 }), {
    headers: { "content-type": "application/json" },
  });
const result = await createClient({ url: "https://bridge.test", fetch }).run("echo hi");
let withoutFetch;
try {
  await createClient({ url: "https://bridge.test", retry: false }).run("echo hi");
} catch (error) {
  withoutFetch = { name: error.name, message: error.message, mayHaveRun: error.mayHaveRun };
}
console.log(JSON.stringify({ stdout: result.stdout, withoutFetch }));
`;

describe.each(TARGETS)("a bundle for $name", ({ platform, conditions }) => {
  it("imports no Node built-in, leaves undici out, and runs with fetch", async () => {
    const result = await build({
      entryPoints: [entry],
      bundle: true,
      write: false,
      format: "esm",
      platform,
      // Workspace packages from their sources, as the repository's tests resolve them.
      conditions: ["@remote-task/source", ...conditions],
      metafile: true,
      logLevel: "silent",
      outfile: "bundle.mjs",
    });
    const inputs = Object.keys(result.metafile.inputs);
    expect(inputs.filter((path) => /node_modules\/undici\//.test(path))).toEqual([]);
    const imports = Object.values(result.metafile.outputs).flatMap((output) =>
      output.imports.map((imported) => imported.path),
    );
    // Only the run-time `import(name)` of undici stays, and it is not followed.
    expect(imports.filter((path) => path.startsWith("node:") || path === "events")).toEqual([]);
    const code = result.outputFiles[0]?.text ?? "";
    expect(code).not.toMatch(/from\s*["'](node:)?events["']/);

    const dir = await mkdtemp(join(tmpdir(), "remote-task-bundle-"));
    dirs.push(dir);
    await writeFile(join(dir, "bundle.mjs"), code);
    await writeFile(join(dir, "program.mjs"), PROGRAM);
    const { stdout } = await promisify(execFile)(process.execPath, [join(dir, "program.mjs")], {
      cwd: dir,
    });
    const outcome = JSON.parse(stdout) as {
      stdout: string;
      withoutFetch: { name: string; message: string; mayHaveRun: boolean };
    };
    expect(outcome.stdout).toBe("hi\n");
    expect(outcome.withoutFetch.name).toBe("ConfigurationError");
    expect(outcome.withoutFetch.message).toMatch(/cannot load undici.*nothing was sent.*`fetch`/);
    expect(outcome.withoutFetch.message).not.toMatch(/may have started/);
    expect(outcome.withoutFetch.mayHaveRun).toBe(false);
  }, 60_000);
});
