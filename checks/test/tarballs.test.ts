/**
 * The packages as an npm consumer gets them: each one packed as `npm publish` would pack it, the
 * tarballs installed into fresh projects outside the repository, then loaded, typechecked and
 * run there with the repository's pinned Node.js.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BuildOptions, build } from "esbuild";
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
/**
 * Protocol, client and tool with the Workers types and no Node.js types: a browser or Worker
 * project, and no optional peer (the OpenAI adapter's types must not need `openai`).
 */
let web: string;
/** The command line alone, as `npm install remote-task` gets it: no optional peer. */
let cli: string;
/**
 * Frameworks whose adapters import nothing of them, so they are not devDependencies of the
 * repository (the Claude Agent SDK's install carries a Claude Code binary of about 400 MB, left
 * out here with --omit=optional; Mastra's core is 150 packages; deepagents brings LangGraph): the
 * versions the adapters are checked with, each installed with the tarballs into a project of its
 * own.
 */
const FRAMEWORKS = {
  claude: "@anthropic-ai/claude-agent-sdk@0.3.333",
  /** Mastra, and AI SDK 5 for its mock model (Mastra calls models of that spec). */
  mastra: ["@mastra/core@1.71.0", "ai@5.0.277"],
  /** deepagents, and langchain (one of its peers) for its createAgent. */
  deepagents: ["deepagents@1.14.1", "langchain@1.5.14"],
  /** The AI SDK's previous majors (5 passes toModelOutput the output itself, as Mastra does). */
  ai5: "ai@5.0.277",
  ai6: "ai@6.0.326",
  /** The oldest of the optional peers' ranges (`^1.23.0`, `>=0.19.0 <1`). */
  oldestPeers: ["@modelcontextprotocol/sdk@1.23.0", "@openai/agents@0.19.0"],
};
let claude: string;
let mastra: string;
let deepagents: string;
let ai5: string;
let ai6: string;
let oldestPeers: string;

function project(name: string, specs: string[], flags: string[] = []): string {
  const dir = join(work, name);
  mkdirSync(dir);
  writeFileSync(
    join(dir, "package.json"),
    JSON.stringify({ name: `consumer-${name}`, version: "1.0.0", private: true }),
  );
  npm(["install", "--prefer-offline", "--no-audit", "--no-fund", ...flags, ...specs], dir);
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
    pinned("packages/tool", "@langchain/core"),
    pinned("packages/bridge", "eventsource-parser"),
    pinned(".", "vitest"),
    pinned(".", "@types/node"),
  ]);
  web = project("web", [
    tarball("protocol"),
    tarball("client"),
    tarball("tool"),
    pinned("apps/worker", "@cloudflare/workers-types"),
  ]);
  cli = project("cli", PACKAGES.map(tarball));
  const runtime = ["protocol", "client", "bridge", "tool"].map((dir) => tarball(dir as PackageDir));
  claude = project(
    "claude",
    [...runtime, FRAMEWORKS.claude, pinned("packages/tool", "@modelcontextprotocol/sdk")],
    ["--omit=optional"],
  );
  mastra = project("mastra", [...runtime, ...FRAMEWORKS.mastra]);
  deepagents = project("deepagents", [
    ...runtime,
    ...FRAMEWORKS.deepagents,
    pinned("packages/tool", "@langchain/core"),
  ]);
  ai5 = project("ai5", [...runtime, FRAMEWORKS.ai5]);
  ai6 = project("ai6", [...runtime, FRAMEWORKS.ai6]);
  oldestPeers = project("oldest-peers", [...runtime, ...FRAMEWORKS.oldestPeers]);
}, 600_000);

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

/** For tests running tsc over every entry point: a few seconds each, a minute on a busy machine. */
const TSC_TIMEOUT = 180_000;

/** A Node.js older than the packages need, when the machine has one (not the pinned one). */
const olderNode = ["/usr/bin/node", "/usr/local/bin/node", "/bin/node"].find((path) => {
  if (!existsSync(path)) return false;
  const version = spawnSync(path, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout;
  const [major = 0, minor = 0] = version.trim().split(".").map(Number);
  return major > 0 && (major < 22 || (major === 22 && minor < 19));
});

/** Subpaths that are ESM only on purpose: the bridge's test helpers (vitest cannot be required). */
const ESM_ONLY = new Set(["@remote-task/bridge/testing"]);

/** The subpaths whose exports entry has a `require` condition. */
function requirable(dir: PackageDir): string[] {
  const exports = packed[dir].manifest.exports ?? {};
  return entryPoints(dir).filter((spec) => {
    const key = spec === packed[dir].name ? "." : `./${spec.slice(packed[dir].name.length + 1)}`;
    return JSON.stringify(exports[key]).includes('"require"');
  });
}

/** Writes `files` and a tsconfig into a fresh folder of a project (the full one) and runs tsc there. */
function tsc(
  name: string,
  compilerOptions: Record<string, unknown>,
  files: Record<string, string>,
  inProject = full,
) {
  const dir = join(inProject, name);
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, ...compilerOptions },
      files: Object.keys(files),
    }),
  );
  return node([join(repo, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], dir);
}

/**
 * Bundles `source` (a module in the project `cwd`) with esbuild; returns the output's size and
 * every import of undici or a Node.js builtin the bundle would need.
 */
async function bundle(cwd: string, source: string, options: BuildOptions) {
  const needed = new Set<string>();
  const result = await build({
    stdin: { contents: source, resolveDir: cwd, loader: "js" },
    bundle: true,
    write: false,
    minify: true,
    format: "esm",
    logLevel: "silent",
    ...options,
    plugins: [
      {
        name: "record-node-imports",
        setup(build) {
          build.onResolve({ filter: /.*/ }, ({ path }) => {
            const bare = path.replace(/^node:/, "");
            if (
              path.startsWith("node:") ||
              builtinModules.includes(bare) ||
              /^undici(\/|$)/.test(path)
            ) {
              needed.add(path);
              return { path, external: true };
            }
            return undefined;
          });
        },
      },
    ],
  });
  const [output] = result.outputFiles ?? [];
  return { bytes: output?.contents.byteLength ?? 0, needed: [...needed].sort() };
}

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

  it.each(PACKAGES)("%s publishes no devDependencies and no repository scripts", (dir) => {
    const { manifest } = packed[dir];
    expect(manifest.devDependencies).toBeUndefined();
    expect(manifest.scripts).toBeUndefined();
    expect(JSON.stringify(manifest)).not.toContain("@remote-task/internal");
    expect(JSON.stringify(manifest)).not.toContain("../");
  });

  it.each(PACKAGES)("%s gives its runtime dependencies ranges, not exact pins", (dir) => {
    const { manifest } = packed[dir];
    const ranges = {
      ...(manifest.dependencies as object),
      ...(manifest.peerDependencies as object),
    };
    for (const [name, range] of Object.entries(ranges)) {
      expect(range, `${dir}: ${name}`).toMatch(/^(\^|>=)\d/);
    }
    expect(JSON.stringify(ranges)).not.toContain('">=0.0.0"');
  });

  it("marks exactly the ESM-only subpaths without a require condition", () => {
    const withoutRequire = PACKAGES.flatMap((dir) =>
      entryPoints(dir).filter((s) => !s.endsWith(".json") && !requirable(dir).includes(s)),
    );
    expect(new Set(withoutRequire)).toEqual(ESM_ONLY);
  });

  it.each(PACKAGES)("%s has a README whose links work outside the repository", (dir) => {
    const { files, tarball } = packed[dir];
    expect(files).toContain("README.md");
    const readme = execFileSync("tar", ["-xzOf", tarball, "package/README.md"], {
      encoding: "utf8",
    });
    expect(readme).not.toMatch(/not on npm/i);
    expect(readme).toContain(`npm install ${dir === "cli" ? "-g " : ""}${packed[dir].name}`);
    const targets = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] as string);
    const broken = targets.filter(
      (target) =>
        !/^https?:\/\//.test(target) &&
        !target.startsWith("#") &&
        !files.includes(target.replace(/^\.\//, "").replace(/#.*$/, "")),
    );
    expect(broken).toEqual([]);
  });

  it.each(PACKAGES)("%s ships no source maps", (dir) => {
    expect(packed[dir].files.filter((f) => f.endsWith(".map"))).toEqual([]);
  });

  it("the command line's bundle holds its version, not its whole package.json", () => {
    const bin = execFileSync("tar", ["-xzOf", packed.cli.tarball, "package/dist/bin.js"], {
      encoding: "utf8",
    });
    expect(bin).toContain(`"${packed.cli.manifest.version}"`);
    for (const field of ["devDependencies", "peerDependenciesMeta", "publishConfig"]) {
      expect(bin).not.toContain(field);
    }
  });

  it("ships no file that can never load", () => {
    expect(packed.bridge.files.filter((f) => f.startsWith("dist/testing.c"))).toEqual([]);
    expect(packed.cli.files.filter((f) => f.endsWith(".cjs"))).toEqual([]);
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

describe("installed from the tarballs: entry points and types", () => {
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

  it(
    "every entry point's types resolve (nodenext ESM and CJS, bundler, node10)",
    () => {
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
      const compiler = join(repo, "node_modules/typescript/bin/tsc");
      for (const [file, { files, ...options }] of Object.entries(configs)) {
        writeFileSync(
          join(types, file),
          JSON.stringify({ compilerOptions: { ...base, ...options }, files }),
        );
        const run = node([compiler, "-p", file], types);
        expect(`${run.stdout}${run.stderr}`, file).toBe("");
        expect(run.status, file).toBe(0);
      }
    },
    TSC_TIMEOUT,
  );

  it(
    "the bridge's, client's and protocol's declarations compile without the DOM lib, lib checks on",
    () => {
      const specs = (["protocol", "client", "bridge"] as const).flatMap(entryPoints);
      const source = specs
        .filter((s) => !s.endsWith(".json"))
        .map((s, i) => `import * as m${i} from "${s}";\nvoid m${i};`)
        .join("\n");
      const run = tsc(
        "types-no-dom",
        { module: "nodenext", lib: ["es2023"], types: ["node"], skipLibCheck: false },
        { "index.mts": source },
      );
      expect(`${run.stdout}${run.stderr}`).toBe("");
      expect(run.status).toBe(0);
    },
    TSC_TIMEOUT,
  );

  it(
    "a CommonJS consumer under module node16 gets the types of every subpath it may require",
    () => {
      const specs = PACKAGES.flatMap(requirable);
      expect(specs).toContain("@remote-task/tool/mcp");
      expect(specs).toContain("@remote-task/tool/ai");
      expect(specs).toContain("@remote-task/tool/pi");
      const source = specs.map((s, i) => `import m${i} = require("${s}");\nvoid m${i};`).join("\n");
      // skipLibCheck: the frameworks' own declarations are theirs; an import our .d.cts cannot make
      // from CommonJS (TS1479) is reported all the same.
      const run = tsc(
        "types-node16-cjs",
        { module: "node16", moduleResolution: "node16", skipLibCheck: true, types: ["node"] },
        { "index.cts": source },
      );
      expect(`${run.stdout}${run.stderr}`).toBe("");
      expect(run.status).toBe(0);
    },
    TSC_TIMEOUT,
  );

  it("a CommonJS app requires the ai and pi adapters and gets working tools", () => {
    const script = `
      const { createRemoteTaskAiTool } = require("@remote-task/tool/ai");
      const { createRemoteTaskPiTool } = require("@remote-task/tool/pi");
      const { jsonSchema } = require("ai");
      const aiTool = createRemoteTaskAiTool({ env: {} });
      const piTool = createRemoteTaskPiTool({ env: {} });
      console.log(JSON.stringify([
        typeof jsonSchema,
        typeof aiTool.execute,
        aiTool.toModelOutput({ output: { text: "hi", isError: false } }),
        piTool.name,
      ]));`;
    const run = node(["-e", script], full);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual([
      "function",
      "function",
      { type: "text", value: "hi" },
      "remote_task",
    ]);
  });
});

describe("installed from the tarballs: browsers, Workers and bundlers", () => {
  it.each([
    ["a browser (DOM lib)", { lib: ["es2022", "dom"], types: [] }],
    [
      "a Worker (@cloudflare/workers-types)",
      { lib: ["es2022"], types: ["@cloudflare/workers-types"] },
    ],
  ])(
    "the client's and the OpenAI adapter's declarations compile in %s, lib checks on, without Node.js types or openai",
    (name, libs) => {
      expect(existsSync(join(web, "node_modules/@types/node"))).toBe(false);
      expect(existsSync(join(web, "node_modules/openai"))).toBe(false);
      const source = [
        'import { createClient, type TaskResult } from "@remote-task/client";',
        'import { createRemoteTaskOpenAITool } from "@remote-task/tool/openai";',
        'const client = createClient({ url: "https://bridge.example", fetch });',
        'export const run = (): Promise<TaskResult> => client.run("echo hi");',
        "const openai = createRemoteTaskOpenAITool({ client });",
        "export const definition: { type: string; name: string } = openai.responsesTool;",
        "export const answer = openai.handleToolCall({",
        '  type: "function_call", call_id: "c1", name: "remote_task", arguments: "{}",',
        "});",
      ].join("\n");
      const run = tsc(
        `types-${name.split(" ")[1]}`,
        { module: "esnext", moduleResolution: "bundler", skipLibCheck: false, ...libs },
        { "index.ts": source },
        web,
      );
      expect(`${run.stdout}${run.stderr}`).toBe("");
      expect(run.status).toBe(0);
    },
    TSC_TIMEOUT,
  );

  it("a bundle using one protocol schema stays small (zod is trimmed)", async () => {
    const { bytes, needed } = await bundle(
      bare,
      'import { execRequestSchema } from "@remote-task/protocol";\n' +
        'console.log(execRequestSchema.safeParse({ sandboxId: "a", command: "true" }).success);',
      { platform: "neutral" },
    );
    expect(needed).toEqual([]);
    // 105 KB when this was written; all of zod (as `import { z } from "zod"` kept it) is 460 KB.
    expect(bytes).toBeLessThan(160_000);
  });

  it.each([
    ["browser", { platform: "browser" }],
    ["neutral", { platform: "neutral" }],
    ["a Worker", { platform: "neutral", conditions: ["workerd", "worker", "browser"] }],
  ] as [string, BuildOptions][])(
    "the client given fetch bundles for %s without undici or Node.js builtins",
    async (_, options) => {
      const { needed } = await bundle(
        bare,
        'import { createClient } from "@remote-task/client";\n' +
          'const client = createClient({ url: "https://bridge.example", fetch: globalThis.fetch });\n' +
          'console.log(await client.run("echo hi"));',
        { ...options },
      );
      expect(needed).toEqual([]);
    },
  );

  it("the bridge's core bundles for platform neutral and runs (ipaddr.js inlined)", async () => {
    const { outputFiles } = await build({
      stdin: {
        contents:
          'import { isPublicAddress, createBridge } from "@remote-task/bridge";\n' +
          'console.log(JSON.stringify([typeof createBridge, isPublicAddress("8.8.8.8"), isPublicAddress("10.1.2.3"), isPublicAddress("::ffff:127.0.0.1")]));',
        resolveDir: full,
        loader: "js",
      },
      bundle: true,
      write: false,
      format: "esm",
      platform: "neutral",
      logLevel: "silent",
    });
    const file = join(full, "neutral-bridge.mjs");
    writeFileSync(file, outputFiles[0]?.text ?? "");
    const run = node([file], full);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual(["function", true, false, false]);
    expect(packed.bridge.manifest.dependencies).not.toHaveProperty("ipaddr.js");
    expect(packed.bridge.files).toContain("THIRD_PARTY_LICENSES.md");
  });
});

describe("installed from the tarballs: the command line and agent frameworks", () => {
  it("the command line installs without the MCP SDK and its HTTP stack, and runs", () => {
    for (const name of ["@modelcontextprotocol/sdk", "express", "openai", "ai"]) {
      expect(existsSync(join(cli, "node_modules", name)), name).toBe(false);
    }
    const bin = join(cli, "node_modules/remote-task/bin/remote-task.js");
    const run = node([bin, "run", "--local", "--", "echo", "without the MCP SDK"], cli);
    expect(run.stdout).toBe("without the MCP SDK\n");
    const needs =
      "the MCP server needs @modelcontextprotocol/sdk, which is not installed (no other command needs it). Install it where remote-task is installed: npm install -g @modelcontextprotocol/sdk";
    const mcp = node([bin, "mcp", "--local"], cli);
    expect(mcp.stderr).toContain(`remote-task: ${needs}`);
    expect(mcp.status).not.toBe(0);
    const mcpBin = join(cli, "node_modules/remote-task/bin/remote-task-mcp.js");
    const alone = node([mcpBin], cli);
    expect(alone.stderr).toContain(`remote-task-mcp: ${needs}`);
    expect(alone.status).not.toBe(0);
  });

  it("the Claude Agent SDK's createSdkMcpServer serves the claude adapter's tool, which runs", () => {
    const script = `
      import { createSdkMcpServer } from "@anthropic-ai/claude-agent-sdk";
      import { Client } from "@modelcontextprotocol/sdk/client/index.js";
      import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
      import { silentLogger } from "@remote-task/bridge";
      import { startEmbeddedBridge } from "@remote-task/bridge/node";
      import { createClient } from "@remote-task/client";
      import { createRemoteTaskClaudeTool } from "@remote-task/tool/claude";
      const bridge = await startEmbeddedBridge({ logger: silentLogger });
      const client = createClient({ url: bridge.url, token: bridge.token });
      const server = createSdkMcpServer({
        name: "remote-task",
        tools: [createRemoteTaskClaudeTool({ client })],
      });
      const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
      await server.instance.connect(serverSide);
      const mcp = new Client({ name: "check", version: "1.0.0" });
      await mcp.connect(clientSide);
      const { tools } = await mcp.listTools();
      const ran = await mcp.callTool({ name: "remote_task", arguments: { command: "echo from claude; exit 3" } });
      console.log(JSON.stringify({
        type: server.type,
        tools: tools.map((t) => [t.name, Object.keys(t.inputSchema.properties ?? {})]),
        ran,
      }));
      await mcp.close();
      await client.close();
      await bridge.close();`;
    const run = node(["--input-type=module", "-e", script], claude);
    expect(run.stderr).toBe("");
    const out = JSON.parse(run.stdout);
    expect(out.type).toBe("sdk");
    expect(out.tools).toEqual([["remote_task", ["command", "timeout"]]]);
    expect(out.ran.isError).toBe(true);
    expect(out.ran.content[0].text).toMatch(/^from claude\n[\s\S]*3/);
  });

  it("Mastra agents with a fake model run commands through the mastra sandbox and the ai tool", () => {
    const script = `
      import { Agent } from "@mastra/core/agent";
      import { Workspace } from "@mastra/core/workspace";
      import { MockLanguageModelV2 } from "ai/test";
      import { silentLogger } from "@remote-task/bridge";
      import { startEmbeddedBridge } from "@remote-task/bridge/node";
      import { createClient } from "@remote-task/client";
      import { createRemoteTaskAiTool } from "@remote-task/tool/ai";
      import { createRemoteTaskSandbox } from "@remote-task/tool/mastra";
      const bridge = await startEmbeddedBridge({ logger: silentLogger });
      const client = createClient({ url: bridge.url, token: bridge.token });
      const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
      // A model that calls toolName with command once, then answers; and what it was sent back.
      function modelCalling(toolName, command) {
        const prompts = [];
        const model = new MockLanguageModelV2({
          doGenerate: async (options) => {
            prompts.push(options.prompt);
            const input = JSON.stringify({ command });
            return prompts.length === 1
              ? { content: [{ type: "tool-call", toolCallId: "call-1", toolName, input }],
                  finishReason: "tool-calls", usage, warnings: [] }
              : { content: [{ type: "text", text: "done" }], finishReason: "stop", usage, warnings: [] };
          },
        });
        const seen = () => prompts[1]?.find((m) => m.role === "tool")?.content?.[0]?.output;
        return { model, seen };
      }
      const viaSandbox = modelCalling("mastra_workspace_execute_command", "echo from a mastra agent; exit 3");
      const sandboxAgent = new Agent({
        id: "sandbox", name: "sandbox", instructions: "Run commands.", model: viaSandbox.model,
        workspace: new Workspace({ sandbox: createRemoteTaskSandbox({ client }) }),
      });
      const first = await sandboxAgent.generate("run it", { maxSteps: 2 });
      const viaTool = modelCalling("remote_task", "echo via the ai tool; exit 4");
      const toolAgent = new Agent({
        id: "tool", name: "tool", instructions: "Run commands.", model: viaTool.model,
        tools: { remote_task: createRemoteTaskAiTool({ client }) },
      });
      const second = await toolAgent.generate("run it", { maxSteps: 2 });
      console.log(JSON.stringify({
        sandbox: [first.text, viaSandbox.seen()],
        tool: [second.text, viaTool.seen()],
      }));
      await client.close();
      await bridge.close();`;
    const run = node(["--input-type=module", "-e", script], mastra);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual({
      sandbox: ["done", { type: "text", value: "from a mastra agent\n\nExit code: 3" }],
      // Mastra calls toModelOutput with the output itself (the AI SDK 5 shape).
      tool: [
        "done",
        { type: "error-text", value: "via the ai tool\n\n\nCommand exited with code 4" },
      ],
    });
  });

  it("a deep agent and a LangChain agent with a fake model run commands through the langchain adapter", () => {
    const script = `
      import { AIMessage } from "@langchain/core/messages";
      import { fakeModel } from "@langchain/core/testing";
      import { createDeepAgent, isSandboxBackend } from "deepagents";
      import { createAgent } from "langchain";
      import { silentLogger } from "@remote-task/bridge";
      import { startEmbeddedBridge } from "@remote-task/bridge/node";
      import { createClient } from "@remote-task/client";
      import { createRemoteTaskBackend, createRemoteTaskLangChainTool } from "@remote-task/tool/langchain";
      const bridge = await startEmbeddedBridge({ logger: silentLogger });
      const client = createClient({ url: bridge.url, token: bridge.token });
      const toolMessage = (result) => {
        const message = result.messages.find((m) => m.type === "tool");
        return [message?.tool_call_id, message?.content, result.messages.at(-1).content];
      };
      const backend = createRemoteTaskBackend({ client });
      const deepModel = fakeModel()
        .respondWithTools([{ name: "execute", args: { command: "echo from a deep agent; exit 3" }, id: "call-1" }])
        .respond(new AIMessage("done"));
      const deep = await createDeepAgent({ model: deepModel, backend })
        .invoke({ messages: [{ role: "user", content: "run it" }] });
      const plainModel = fakeModel()
        .respondWithTools([{ name: "remote_task", args: { command: "echo from langchain" }, id: "call-2" }])
        .respond(new AIMessage("done"));
      const plain = await createAgent({ model: plainModel, tools: [createRemoteTaskLangChainTool({ client })] })
        .invoke({ messages: [{ role: "user", content: "run it" }] });
      console.log(JSON.stringify({
        sandbox: isSandboxBackend(backend),
        deep: toolMessage(deep),
        plain: toolMessage(plain),
      }));
      await client.close();
      await bridge.close();`;
    const run = node(["--input-type=module", "-e", script], deepagents);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual({
      sandbox: true,
      deep: ["call-1", "from a deep agent\n\n[Command failed with exit code 3]", "done"],
      plain: ["call-2", "from langchain\n", "done"],
    });
  });

  /** A mock model of AI SDK `major` (its provider spec's shapes) that calls remote_task once. */
  const mockModel = {
    5: {
      mock: "MockLanguageModelV2",
      usage: "{ inputTokens: 1, outputTokens: 1, totalTokens: 2 }",
      stop: '"stop"',
      toolCalls: '"tool-calls"',
    },
    6: {
      mock: "MockLanguageModelV3",
      usage:
        "{ inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } }",
      stop: '{ unified: "stop", raw: "stop" }',
      toolCalls: '{ unified: "tool-calls", raw: "tool_calls" }',
    },
  } as const;

  it.each([5, 6] as const)(
    "the ai adapter works with AI SDK %i (an optional peer's earlier major)",
    (major) => {
      const { mock, usage, stop, toolCalls } = mockModel[major];
      const script = `
      import { generateText, stepCountIs } from "ai";
      import { ${mock} } from "ai/test";
      import { silentLogger } from "@remote-task/bridge";
      import { startEmbeddedBridge } from "@remote-task/bridge/node";
      import { createClient } from "@remote-task/client";
      import { createRemoteTaskAiTool } from "@remote-task/tool/ai";
      const bridge = await startEmbeddedBridge({ logger: silentLogger });
      const client = createClient({ url: bridge.url, token: bridge.token });
      const usage = ${usage};
      const call = { type: "tool-call", toolCallId: "call-1", toolName: "remote_task",
        input: JSON.stringify({ command: "echo from ai${major}; exit 2" }) };
      const model = new ${mock}({
        doGenerate: async (options) => options.prompt.some((m) => m.role === "tool")
          ? { content: [{ type: "text", text: "done" }], finishReason: ${stop}, usage, warnings: [] }
          : { content: [call], finishReason: ${toolCalls}, usage, warnings: [] },
      });
      const result = await generateText({
        model, prompt: "run", stopWhen: stepCountIs(2),
        tools: { remote_task: createRemoteTaskAiTool({ client }) },
      });
      const answer = model.doGenerateCalls[1].prompt.find((m) => m.role === "tool");
      console.log(JSON.stringify({ text: result.text, seen: answer.content[0].output }));
      await client.close();
      await bridge.close();`;
      const run = node(["--input-type=module", "-e", script], major === 5 ? ai5 : ai6);
      expect(run.stderr).toBe("");
      expect(JSON.parse(run.stdout)).toEqual({
        text: "done",
        seen: { type: "error-text", value: `from ai${major}\n\n\nCommand exited with code 2` },
      });
    },
  );

  it("the MCP and OpenAI Agents adapters work with the oldest peers their ranges take", () => {
    const script = `
      import { RunContext } from "@openai/agents";
      import { Client } from "@modelcontextprotocol/sdk/client/index.js";
      import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
      import { silentLogger } from "@remote-task/bridge";
      import { startEmbeddedBridge } from "@remote-task/bridge/node";
      import { createClient } from "@remote-task/client";
      import { createRemoteTaskMcpServer } from "@remote-task/tool/mcp";
      import { createRemoteTaskOpenAIAgentsTool } from "@remote-task/tool/openai-agents";
      const bridge = await startEmbeddedBridge({ logger: silentLogger });
      const client = createClient({ url: bridge.url, token: bridge.token });
      const server = createRemoteTaskMcpServer({ client });
      const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
      await server.connect(serverSide);
      const mcp = new Client({ name: "check", version: "1.0.0" });
      await mcp.connect(clientSide);
      const { tools } = await mcp.listTools();
      const called = await mcp.callTool({ name: "remote_task", arguments: { command: "echo from mcp" } });
      const invoked = await createRemoteTaskOpenAIAgentsTool({ client }).invoke(
        new RunContext(),
        JSON.stringify({ command: "echo from agents", timeout: null }),
      );
      console.log(JSON.stringify({
        schema: tools.map((t) => [t.name, Object.keys(t.inputSchema.properties ?? {})]),
        called: called.content[0].text,
        invoked,
      }));
      await mcp.close();
      await client.close();
      await bridge.close();`;
    const run = node(["--input-type=module", "-e", script], oldestPeers);
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual({
      schema: [["remote_task", ["command", "timeout"]]],
      called: "from mcp\n",
      invoked: "from agents\n",
    });
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
      const mcp = spawnSync(old, [join(full, "node_modules/remote-task/bin/remote-task-mcp.js")], {
        encoding: "utf8",
      });
      expect(mcp.stderr).toMatch(/^remote-task-mcp needs Node\.js >= 22\.19\.0/);
      expect(mcp.status).toBe(125);
      const script =
        'try { require("@remote-task/client").createClient({ url: "http://127.0.0.1:1" }) } catch (e) { console.log(e.name + ": " + e.message) }';
      const client = spawnSync(old, ["-e", script], { cwd: bare, encoding: "utf8" });
      expect(client.stdout).toMatch(
        /^ConfigurationError: @remote-task\/client needs Node\.js >= 22\.19\.0/,
      );
    },
  );
});
