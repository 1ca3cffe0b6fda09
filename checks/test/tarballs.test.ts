/**
 * The packages as an npm consumer gets them: each one packed as `npm publish` would pack it, the
 * tarballs installed into fresh projects outside the repository, then loaded, typechecked and
 * run there with the repository's pinned Node.js.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repo = new URL("../../", import.meta.url).pathname;
const PACKAGES = ["protocol", "client", "bridge", "tool", "cli"] as const;
type PackageDir = (typeof PACKAGES)[number];

interface Packed {
  name: string;
  tarball: string;
  files: string[];
  manifest: Record<string, unknown> & { exports?: Record<string, unknown> };
}

function readJson(path: string) {
  return JSON.parse(readFileSync(path, "utf8"));
}

/** The version of a dependency the repository pins, so npm finds it in its cache. */
function pinned(dir: string, name: string): string {
  const pkg = readJson(join(repo, dir, "package.json"));
  const version = pkg.devDependencies?.[name] ?? pkg.dependencies?.[name];
  if (!version) throw new Error(`${dir}/package.json pins no ${name}`);
  return `${name}@${version}`;
}

/** The environment without the npm variables of the `npm test` this runs in. */
function npmEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(key) || /^npm_config_(cache|registry|userconfig)$/i.test(key)) {
      env[key] = value;
    }
  }
  return { ...env, NO_UPDATE_NOTIFIER: "1", npm_config_update_notifier: "false" };
}

function npm(args: string[], cwd: string): string {
  return execFileSync("npm", args, {
    cwd,
    env: npmEnv(),
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: 180_000,
  });
}

/** Runs Node.js (the repository's pinned one, which runs these tests) in `cwd`. */
function node(args: string[], cwd: string) {
  return spawnSync(process.execPath, args, { cwd, encoding: "utf8", timeout: 60_000 });
}

/** The repository's package.json files before anything is packed. */
const manifestsBefore = Object.fromEntries(
  PACKAGES.map((dir) => [dir, readFileSync(join(repo, "packages", dir, "package.json"), "utf8")]),
) as Record<PackageDir, string>;

let work: string;
const packed = {} as Record<PackageDir, Packed>;
/** Protocol, client and tool alone, without any optional peer. */
let bare: string;
/** Every package and the optional peers. */
let full: string;

function project(name: string, specs: string[]): string {
  const dir = join(work, name);
  mkdirSync(dir);
  writeFileSync(
    join(dir, "package.json"),
    JSON.stringify({ name: `consumer-${name}`, version: "1.0.0", private: true }),
  );
  npm(["install", "--prefer-offline", "--no-audit", "--no-fund", ...specs], dir);
  return dir;
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "rt-tarballs-"));
  const out = join(work, "tarballs");
  mkdirSync(out);
  for (const dir of PACKAGES) {
    const [info] = JSON.parse(
      npm(["pack", "--json", "--pack-destination", out], join(repo, "packages", dir)),
    );
    const tarball = join(out, info.filename);
    const manifest = JSON.parse(
      execFileSync("tar", ["-xzOf", tarball, "package/package.json"], { encoding: "utf8" }),
    );
    packed[dir] = {
      name: info.name,
      tarball,
      files: info.files.map((f: { path: string }) => f.path),
      manifest,
    };
  }
  const tarball = (dir: PackageDir) => packed[dir].tarball;
  bare = project("bare", [tarball("protocol"), tarball("client"), tarball("tool")]);
  full = project("full", [
    ...PACKAGES.map(tarball),
    pinned("packages/tool", "ai"),
    pinned("packages/tool", "@modelcontextprotocol/sdk"),
    pinned("packages/tool", "@openai/agents"),
    pinned("packages/bridge", "eventsource-parser"),
    pinned(".", "vitest"),
  ]);
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** Every subpath a package exports, as `name/subpath`, without wildcards and package.json. */
function entryPoints(dir: PackageDir): string[] {
  const { name, manifest } = packed[dir];
  return Object.keys(manifest.exports ?? {})
    .filter((key) => !key.includes("*") && key !== "./package.json")
    .map((key) => (key === "." ? name : `${name}/${key.slice(2)}`));
}

/** A Node.js older than the packages need, when the machine has one (not the pinned one). */
const olderNode = ["/usr/bin/node", "/usr/local/bin/node", "/bin/node"].find((path) => {
  if (!existsSync(path)) return false;
  const version = spawnSync(path, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout;
  const [major = 0, minor = 0] = version.trim().split(".").map(Number);
  return major > 0 && (major < 22 || (major === 22 && minor < 19));
});

/** Subpaths that are ESM only on purpose. */
const ESM_ONLY = new Set(["@remote-task/bridge/testing"]);

describe("each tarball", () => {
  it.each(PACKAGES)("%s ships the LICENSE and no sources", (dir) => {
    const { files } = packed[dir];
    expect(files).toContain("LICENSE");
    expect(files.filter((f) => f === "src" || f.startsWith("src/"))).toEqual([]);
    expect(readFileSync(join(full, "node_modules", packed[dir].name, "LICENSE"), "utf8")).toBe(
      readFileSync(join(repo, "LICENSE"), "utf8"),
    );
  });

  it.each(PACKAGES)("%s publishes no repository-internal export condition", (dir) => {
    expect(JSON.stringify(packed[dir].manifest)).not.toContain("@remote-task/source");
    expect(JSON.stringify(packed[dir].manifest.exports ?? {})).not.toContain("./src/");
  });

  it("ships no file that can never load", () => {
    expect(packed.bridge.files.filter((f) => f.startsWith("dist/testing.c"))).toEqual([]);
    expect(packed.tool.files.filter((f) => f.startsWith("dist/mcp-bin.c"))).toEqual([]);
  });

  it("leaves the repository's packages as they were", () => {
    for (const dir of PACKAGES) {
      const folder = join(repo, "packages", dir);
      expect(readFileSync(join(folder, "package.json"), "utf8"), dir).toBe(manifestsBefore[dir]);
      expect(existsSync(join(folder, "package.json.prepack")), dir).toBe(false);
      expect(existsSync(join(folder, "LICENSE")), dir).toBe(false);
    }
  });
});

describe("installed from the tarballs", () => {
  it("every entry point loads with import, and with require unless it is ESM only", () => {
    const specs = PACKAGES.flatMap(entryPoints);
    expect(specs).toContain("@remote-task/tool/mcp");
    const script = `
      import { createRequire } from "node:module";
      const require = createRequire(import.meta.url);
      const specs = ${JSON.stringify(specs)};
      const esmOnly = new Set(${JSON.stringify([...ESM_ONLY])});
      const failed = [];
      for (const spec of specs) {
        const json = spec.endsWith(".json");
        try { await (json ? import(spec, { with: { type: "json" } }) : import(spec)); }
        catch (e) { failed.push("import " + spec + ": " + e.message); }
        if (esmOnly.has(spec)) continue;
        try { require(spec); } catch (e) { failed.push("require " + spec + ": " + e.message); }
      }
      console.log(JSON.stringify(failed));`;
    const run = node(["--input-type=module", "-e", script], full);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual([]);
  });

  it("every entry point's types resolve (nodenext ESM and CJS, bundler, node10)", () => {
    const specs = PACKAGES.flatMap(entryPoints).filter((s) => !s.endsWith(".json"));
    const imports = specs.map((s, i) => `import * as m${i} from "${s}";\nvoid m${i};`).join("\n");
    const requires = specs
      .filter((s) => !ESM_ONLY.has(s))
      .map((s, i) => `import m${i} = require("${s}");\nvoid m${i};`)
      .join("\n");
    const types = join(full, "types");
    mkdirSync(types, { recursive: true });
    writeFileSync(join(types, "esm.mts"), imports);
    writeFileSync(join(types, "cjs.cts"), requires);
    writeFileSync(join(types, "plain.ts"), requires);
    const base = { strict: true, noEmit: true, skipLibCheck: true, types: [] };
    const configs = {
      "tsconfig.nodenext.json": { module: "nodenext", files: ["esm.mts", "cjs.cts"] },
      "tsconfig.bundler.json": {
        module: "esnext",
        moduleResolution: "bundler",
        files: ["esm.mts"],
      },
      "tsconfig.node10.json": {
        module: "commonjs",
        moduleResolution: "node10",
        files: ["plain.ts"],
      },
    };
    const tsc = join(repo, "node_modules/typescript/bin/tsc");
    for (const [file, { files, ...options }] of Object.entries(configs)) {
      writeFileSync(
        join(types, file),
        JSON.stringify({ compilerOptions: { ...base, ...options }, files }),
      );
      const run = node([tsc, "-p", file], types);
      expect(`${run.stdout}${run.stderr}`, file).toBe("");
      expect(run.status, file).toBe(0);
    }
  });

  it("the command line runs a task on its embedded bridge", () => {
    const bin = join(full, "node_modules/remote-task/bin/remote-task.js");
    const run = node([bin, "run", "--local", "--", "echo", "from a tarball"], full);
    expect(run.stdout).toBe("from a tarball\n");
    expect(run.status).toBe(0);
  });

  it("the tool's root entry loads without any optional peer (ESM and CJS)", () => {
    const esm = node(
      [
        "--input-type=module",
        "-e",
        'import("@remote-task/tool").then((m) => console.log(typeof m.createRemoteTaskTool))',
      ],
      bare,
    );
    expect(esm.stdout).toBe("function\n");
    const cjs = node(
      ["-e", 'console.log(typeof require("@remote-task/tool").createRemoteTaskTool)'],
      bare,
    );
    expect(cjs.stdout).toBe("function\n");
  });

  it("remote-task-mcp without the MCP SDK says which package to install", () => {
    const bin = join(bare, "node_modules/@remote-task/tool/bin/remote-task-mcp.js");
    const run = node([bin], bare);
    expect(run.stderr).toBe(
      "remote-task-mcp: the MCP server needs @modelcontextprotocol/sdk, which is not installed. Install it next to @remote-task/tool: npm install @modelcontextprotocol/sdk\n",
    );
    expect(run.status).toBe(1);
  });

  // Runs where the machine's own Node.js is older than 22.19 (as on the machine this was built on).
  it.runIf(olderNode !== undefined)(
    "on an older Node.js, bins and client say which version they need",
    () => {
      const old = olderNode as string;
      const cli = spawnSync(
        old,
        [join(full, "node_modules/remote-task/bin/remote-task.js"), "run", "--", "true"],
        {
          encoding: "utf8",
        },
      );
      expect(cli.stderr).toMatch(
        /^remote-task needs Node\.js >= 22\.19\.0; this is Node\.js \d+\.\d+\.\d+\.\n$/,
      );
      expect(cli.status).toBe(125);
      const mcp = spawnSync(
        old,
        [join(bare, "node_modules/@remote-task/tool/bin/remote-task-mcp.js")],
        {
          encoding: "utf8",
        },
      );
      expect(mcp.stderr).toMatch(/^remote-task-mcp needs Node\.js >= 22\.19\.0/);
      expect(mcp.status).toBe(1);
      const script =
        'try { require("@remote-task/client").createClient({ url: "http://127.0.0.1:1" }) } catch (e) { console.log(e.name + ": " + e.message) }';
      const client = spawnSync(old, ["-e", script], { cwd: bare, encoding: "utf8" });
      expect(client.stdout).toMatch(
        /^ConfigurationError: @remote-task\/client needs Node\.js >= 22\.19\.0/,
      );
    },
  );
});
