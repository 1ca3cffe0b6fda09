import { posix } from "node:path";
import { SANDBOX_TEXTS } from "@remote-task/internal";
import { BackendError, type ExecSpec } from "../backend.js";
import { SANDBOX_WORKSPACE } from "./workspace.js";

/** Longest path and path component Linux accepts. */
const PATH_MAX = 4_095;
const NAME_MAX = 255;

function invalidCwd(message: string): BackendError {
  return new BackendError("invalid_request", message, { path: ["cwd"] });
}

/** Refuses a path the kernel would refuse (too long, or a component too long). */
export function checkPathLength(path: string, what: string): void {
  if (Buffer.byteLength(path) > PATH_MAX)
    throw invalidCwd(`${what} is longer than ${PATH_MAX} bytes; use a shorter cwd.`);
  for (const part of path.split("/")) {
    if (Buffer.byteLength(part) > NAME_MAX) {
      throw invalidCwd(
        `cwd has a path component longer than ${NAME_MAX} bytes ("${part.slice(0, 32)}..."); use shorter directory names.`,
      );
    }
  }
}

/**
 * Maps a request cwd into the sandbox, or refuses it. `/workspace` always exists (fresh and empty
 * for each call): a path below it does not, and like any directory the sandbox does not have it is
 * refused, never created, as on every backend. Without bubblewrap only `/workspace` itself is
 * accepted; with bubblewrap any directory the sandbox has (`exists`).
 */
export function resolveCwd(
  cwd: string,
  bwrap: boolean,
  exists: (dir: string) => boolean,
): { inside: string } {
  const normal = posix.normalize(cwd).replace(/(.)\/+$/, "$1");
  checkPathLength(normal, "cwd");
  if (normal === SANDBOX_WORKSPACE || (bwrap && exists(normal))) return { inside: normal };
  if (bwrap || normal.startsWith(`${SANDBOX_WORKSPACE}/`)) {
    throw invalidCwd(SANDBOX_TEXTS.missingCwd(normal.slice(0, 200)));
  }
  throw invalidCwd(
    `cwd must be ${SANDBOX_WORKSPACE}: this bridge runs commands without bubblewrap isolation, where other directories are not part of the sandbox.`,
  );
}

/**
 * A process receives its command, directory and environment as C strings, where NUL cannot
 * pass; refuse such a request as the caller's mistake before spawn throws a message that quotes
 * the value (an env value may be a secret).
 */
export function refuseNul(spec: ExecSpec): void {
  const fields: [ReadonlyArray<string>, string][] = [
    [["command"], spec.command],
    [["cwd"], spec.cwd],
    ...Object.entries(spec.env).map(([name, value]): [string[], string] => [["env", name], value]),
  ];
  for (const [path, value] of fields) {
    if (value.includes("\0")) {
      throw new BackendError(
        "invalid_request",
        `${path.join(".")} contains a NUL character, which a process cannot receive; remove it.`,
        { path },
      );
    }
  }
}
