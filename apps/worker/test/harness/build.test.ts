/**
 * `npm run build`'s command, `wrangler deploy --dry-run --containers-rollout=none`: it bundles the
 * Worker from wrangler.jsonc as deployed, without Docker (no image is built), and without the
 * warning a second environment in wrangler.jsonc would print on every deploy.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const WORKER_DIR = fileURLToPath(new URL("../../", import.meta.url));
/** The wrangler bin (its package exports only its API, so found next to its manifest). */
const WRANGLER = join(
  dirname(createRequire(import.meta.url).resolve("wrangler/package.json")),
  "bin/wrangler.js",
);
const BUILD = JSON.parse(readFileSync(join(WORKER_DIR, "package.json"), "utf8")).scripts
  .build as string;

it("bundles the Worker without Docker, warning of nothing", async () => {
  expect(BUILD).toBe("wrangler deploy --dry-run --containers-rollout=none --outdir dist");
  const outdir = await mkdtemp(join(tmpdir(), "rt-worker-build-"));
  try {
    const args = BUILD.split(" ").slice(1, -1);
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [WRANGLER, ...args, outdir],
      {
        cwd: WORKER_DIR,
        env: {
          ...process.env,
          // Any attempt to build the image fails.
          WRANGLER_DOCKER_BIN: "/nonexistent/docker",
          WRANGLER_SEND_METRICS: "false",
          CLOUDFLARE_CF_FETCH_ENABLED: "false",
        },
      },
    );
    const output = stdout + stderr;
    expect(output).toContain("--dry-run: exiting now.");
    expect(output).not.toMatch(/WARNING|Multiple environments/);
    expect(existsSync(join(outdir, "index.js"))).toBe(true);
  } finally {
    await rm(outdir, { recursive: true, force: true });
  }
}, 120_000);
