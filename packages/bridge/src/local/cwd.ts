import { posix } from "node:path";
import { BackendError, type ExecSpec } from "../backend.js";
import { SANDBOX_WORKSPACE } from "./bwrap.js";

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
 * Maps a request cwd into the sandbox: `/workspace` and below map into the call's workspace;
 * with bubblewrap any other absolute path is real inside the sandbox.
 */
export function resolveCwd(
  cwd: string,
  bwrap: boolean,
): { inside: string; workspaceRelative?: string } {
  const normal = posix.normalize(cwd).replace(/(.)\/+$/, "$1");
  checkPathLength(normal, "cwd");
  if (normal === SANDBOX_WORKSPACE || normal.startsWith(`${SANDBOX_WORKSPACE}/`)) {
    return { inside: normal, workspaceRelative: normal.slice(SANDBOX_WORKSPACE.length + 1) };
  }
  if (bwrap) return { inside: normal };
  throw invalidCwd(
    `cwd must be ${SANDBOX_WORKSPACE} or a path under it: this bridge runs commands without bubblewrap isolation, where other directories are not part of the sandbox.`,
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
