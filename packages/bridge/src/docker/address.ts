/**
 * Which engine the docker backend talks to: the address it is given, else `DOCKER_HOST`, else the
 * first of the usual sockets that exists (Docker's, Docker Desktop's per-user one, rootless
 * Podman's, rootful Podman's).
 */

import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { EngineEndpoint } from "./engine.js";

/** The sockets tried in order when neither an address nor `DOCKER_HOST` is given. */
export function defaultSockets(env: NodeJS.ProcessEnv = process.env): string[] {
  const uid = process.getuid?.();
  const runtimeDir = env.XDG_RUNTIME_DIR ?? (uid === undefined ? undefined : `/run/user/${uid}`);
  return [
    "/var/run/docker.sock",
    join(homedir(), ".docker/run/docker.sock"),
    ...(runtimeDir === undefined ? [] : [join(runtimeDir, "podman/podman.sock")]),
    "/run/podman/podman.sock",
  ];
}

/**
 * Parses `unix:///path` or `tcp://host:port` (plain HTTP); throws a `TypeError` for any other
 * form (TLS, `ssh://`, `npipe://`), naming the way around it.
 */
export function parseEngineAddress(address: string): EngineEndpoint {
  if (address.startsWith("unix://")) {
    const socketPath = address.slice("unix://".length);
    if (!socketPath.startsWith("/")) {
      throw new TypeError(
        `Engine address ${address} must name an absolute socket path (unix:///path).`,
      );
    }
    return { socketPath };
  }
  if (address.startsWith("/")) return { socketPath: address };
  const tcp = /^tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^:/]+):(\d{1,5})\/?$/.exec(address);
  if (tcp !== null) {
    const port = Number(tcp[2]);
    if (port > 0 && port < 65_536) return { host: tcp[1]!.replace(/^\[|\]$/g, ""), port };
  }
  throw new TypeError(
    `Engine address ${JSON.stringify(address)} is not unix:///path or tcp://host:port. For ssh:// or TLS engines, forward the engine's socket to a local one (ssh -L /tmp/docker.sock:/var/run/docker.sock host) and use unix:///tmp/docker.sock.`,
  );
}

/** The engine to use, and where that choice came from (for messages). */
export function resolveEngineAddress(
  address: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): { endpoint: EngineEndpoint; source: string } {
  if (address !== undefined) return { endpoint: parseEngineAddress(address), source: "option" };
  const fromEnv = env.DOCKER_HOST;
  if (fromEnv !== undefined && fromEnv !== "") {
    if (env.DOCKER_TLS_VERIFY !== undefined && env.DOCKER_TLS_VERIFY !== "") {
      throw new TypeError(
        "DOCKER_TLS_VERIFY is set, but the docker backend speaks plain HTTP only; forward the engine's socket to a local one instead.",
      );
    }
    return { endpoint: parseEngineAddress(fromEnv), source: "DOCKER_HOST" };
  }
  const found = defaultSockets(env).find((path) => existsSync(path));
  if (found === undefined) {
    throw new TypeError(
      `No container engine address: DOCKER_HOST is not set and none of ${defaultSockets(env).join(", ")} exists. Start Docker, or Podman's API (podman system service), or give its address: --docker-engine unix:///path.sock on the command line, the docker backend's engine option.`,
    );
  }
  return { endpoint: { socketPath: found }, source: "default socket" };
}
