/**
 * `--docker IMAGE`: the embedded bridge runs each call in a fresh container of IMAGE on a Docker
 * or Podman engine instead of the local backend. The flags, and the backend they make, live here
 * so `run`, `run-many`, `health`, `serve` and `mcp` each take them with one line.
 */

import type { DockerBackendOptions } from "@remote-task/bridge/docker";
import { type Command, InvalidArgumentError } from "commander";

export interface DockerFlags {
  /** The image each call runs in; starts the embedded bridge with the docker backend. */
  docker?: string;
  dockerRuntime?: string;
  dockerEngine?: string;
  dockerUser?: string;
  dockerUlimit?: Record<string, number>;
}

/** `name=value[,name=value...]`, e.g. `nproc=32768`. */
function ulimitList(value: string, previous: Record<string, number> = {}): Record<string, number> {
  const limits = { ...previous };
  for (const item of value.split(",")) {
    const match = /^([a-z]+)=(\d+)$/.exec(item.trim());
    if (match === null) {
      throw new InvalidArgumentError("expected name=value[,name=value...], e.g. nproc=32768.");
    }
    limits[match[1] as string] = Number(match[2]);
  }
  return limits;
}

/** Adds `--docker IMAGE` and the other `--docker-*` flags. */
export function dockerOptions(command: Command): Command {
  return command
    .option(
      "--docker <image>",
      "run each call in a fresh container of this image on Docker or Podman (embedded bridge)",
    )
    .option("--docker-runtime <name>", "the engine's runtime for the containers, e.g. runsc")
    .option(
      "--docker-engine <address>",
      "the engine: unix:///path.sock or tcp://host:port (default: $DOCKER_HOST, then the usual sockets)",
    )
    .option(
      "--docker-user <user>",
      "who commands run as in the container (default: a uid of its own per container, no host account)",
    )
    .option(
      "--docker-ulimit <name=value>",
      "more rlimits for the containers, e.g. nproc=32768 where the engine's default is too high",
      ulimitList,
    );
}

/**
 * The docker backend's options for the flags (`startEmbeddedBridge` creates the backend, checks the
 * engine and image, and closes it with the bridge), or undefined without `--docker`.
 */
export function dockerBackendOptions(
  flags: DockerFlags,
  limits: {
    processes?: number;
    memoryBytes?: number;
    workspaceBytes?: number;
    tmpBytes?: number;
  } = {},
): DockerBackendOptions | undefined {
  if (flags.docker === undefined) return undefined;
  return {
    image: flags.docker,
    engine: flags.dockerEngine,
    runtime: flags.dockerRuntime,
    user: flags.dockerUser,
    ulimits: flags.dockerUlimit,
    limits,
  };
}
