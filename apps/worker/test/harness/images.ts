/**
 * The "images" harness containers run: the project's stand-in container server (CI), or the real
 * sandbox-sdk container server built from source, on request:
 *
 *   REMOTE_TASK_SANDBOX_SERVER=/path/to/sandbox-container/dist/index.js \
 *   REMOTE_TASK_BUN=/path/to/bun npm test -w apps/worker
 *
 * (apps/worker/README.md, "How this is tested", says how to build both.)
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import type { ContainerImage } from "./container.ts";
import { strippedScript } from "./stripped.ts";

/** PATH of the SDK's image (Ubuntu). */
const IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const NODE_INSIDE = "/opt/remote-task-harness/node";

/** The exact `@cloudflare/sandbox` version the Worker depends on. */
export function sdkVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  return pkg.dependencies["@cloudflare/sandbox"] as string;
}

export function standInImage(): ContainerImage {
  return {
    name: "stand-in",
    mounts: [
      {
        host: strippedScript(
          fileURLToPath(new URL("../stand-in-server/server.ts", import.meta.url)),
        ),
        inside: "/container-server/server.mjs",
      },
    ],
    command: [NODE_INSIDE, "/container-server/server.mjs"],
    env: { PATH: IMAGE_PATH, SANDBOX_VERSION: sdkVersion() },
  };
}

/** The real container server, when both variables name existing files; otherwise `undefined`. */
function realServerImage(
  env: Readonly<Record<string, string | undefined>> = process.env,
): ContainerImage | undefined {
  const server = env.REMOTE_TASK_SANDBOX_SERVER;
  const bun = env.REMOTE_TASK_BUN;
  if (server === undefined && bun === undefined) return undefined;
  if (server === undefined || bun === undefined || !existsSync(server) || !existsSync(bun)) {
    throw new Error(
      "REMOTE_TASK_SANDBOX_SERVER must name the built container server (dist/index.js) and " +
        "REMOTE_TASK_BUN the Bun binary; see apps/worker/README.md, How this is tested.",
    );
  }
  return {
    name: "sandbox-container (real, built from source)",
    mounts: [
      { host: bun, inside: "/opt/bun/bin/bun" },
      { host: dirname(server), inside: "/container-server/dist" },
    ],
    command: ["/opt/bun/bin/bun", `/container-server/dist/${server.split("/").at(-1)}`],
    // As the SDK's image sets them, minus the interpreter pools (no Python or Node there).
    env: {
      PATH: `${IMAGE_PATH}:/opt/bun/bin`,
      SANDBOX_VERSION: env.REMOTE_TASK_SANDBOX_SERVER_VERSION ?? "unknown",
      PYTHON_POOL_MIN_SIZE: "0",
      JAVASCRIPT_POOL_MIN_SIZE: "0",
      TYPESCRIPT_POOL_MIN_SIZE: "0",
    },
  };
}

/** The real server when requested, else the stand-in. */
export function imageUnderTest(): ContainerImage {
  return realServerImage() ?? standInImage();
}
