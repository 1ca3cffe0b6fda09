/**
 * The "image" the Worker benchmark's harness containers run: the project's stand-in container
 * server (the Worker starts them with its own PID 1; the tests use the worker harness's plain one).
 */
import { fileURLToPath } from "node:url";
import type { ContainerImage } from "./container.ts";
import { strippedScript } from "./stripped.ts";

/** PATH of the SDK's image (Ubuntu). */
const IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const NODE_INSIDE = "/opt/remote-task-harness/node";

/** The `@cloudflare/sandbox` version whose container server the stand-in speaks. */
export function sdkVersion(): string {
  return "0.12.10";
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
