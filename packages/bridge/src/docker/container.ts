/**
 * What one call's container is: the create request the engine gets (image, limits, security,
 * labels), and the small shell prelude that enters the call's cwd and reports back before the
 * command runs.
 */

import type { ExecSpec } from "../backend.js";
import { checkPathLength, refuseNul } from "../local/cwd.js";
import type { SandboxLimits } from "../local/limits.js";

/** Per-container limits of the docker backend. */
export interface DockerLimits extends SandboxLimits {
  /** CPUs the container may use (fractions allowed); undefined: no CPU limit. */
  cpus?: number | undefined;
  /** The open-files limit (`nofile` ulimit, soft and hard) of every process. */
  openFiles: number;
}

/** Labels on every container this backend creates. */
export const LABELS = {
  /** The backend instance that owns it (see local/ownership.ts): a dead owner's are swept. */
  owner: "remote-task.owner",
  /** The machine the owner runs on: only a bridge on the same machine can tell it is dead. */
  host: "remote-task.host",
  sandboxId: "remote-task.sandbox-id",
} as const;

export const SANDBOX_WORKSPACE = "/workspace";

/**
 * Run by `/bin/sh -c` with the cwd, a per-call nonce, the command and whether stdin comes as
 * `$1`..`$4` (so no value needs quoting): enters the cwd or reports it missing; with stdin, reads
 * all of it into a file in /tmp first (so the engine's stdin stream is drained whether or not the
 * command reads it: Podman drops a container's last output when its stdin write fails), which
 * becomes the command's standard input and is removed before the command runs; says it is ready,
 * and runs the command with bash where the image has it, else with `/bin/sh`. Both reports go to
 * stderr, first, where the backend reads and removes them.
 */
const PRELUDE = [
  `cd -- "$1" 2>/dev/null || { printf 'remote-task:%s:cwd-missing\\n' "$2" >&2; exit 125; }`,
  `if [ "$4" = 1 ]; then cat > "/tmp/.remote-task-stdin-$2" && exec < "/tmp/.remote-task-stdin-$2" && rm -f "/tmp/.remote-task-stdin-$2" || exit 125; fi`,
  `printf 'remote-task:%s:ready\\n' "$2" >&2`,
  `[ -x /bin/bash ] && exec /bin/bash -c "$3"`,
  `exec /bin/sh -c "$3"`,
].join("; ");

export function readyMarker(nonce: string): string {
  return `remote-task:${nonce}:ready\n`;
}

export function missingCwdMarker(nonce: string): string {
  return `remote-task:${nonce}:cwd-missing\n`;
}

export interface ContainerSettings {
  image: string;
  user: string;
  runtime?: string | undefined;
  readOnlyRootfs: boolean;
  limits: DockerLimits;
  ulimits: Readonly<Record<string, number>>;
  /**
   * Podman gives a tmpfs over a directory of the image that directory's owner and mode, whatever
   * `mode=` says; its `U` option makes the container's user the owner instead. Docker honours
   * `mode=1777` and knows no `U`.
   */
  podman: boolean;
  labels: Record<string, string>;
}

/** Normalises the request's cwd; a path under `/workspace` other than itself cannot exist yet. */
export function checkCwd(spec: ExecSpec): string {
  refuseNul(spec);
  const cwd = spec.cwd.replace(/\/+/g, "/").replace(/(.)\/$/, "$1");
  checkPathLength(cwd, "cwd");
  return cwd;
}

/** The body of `POST /containers/create` for one call. */
export function createBody(
  settings: ContainerSettings,
  spec: ExecSpec,
  cwd: string,
  nonce: string,
): Record<string, unknown> {
  const { limits } = settings;
  const tmpfs = (bytes: number) =>
    `rw,exec,nosuid,nodev,size=${bytes},${settings.podman ? "U" : "mode=1777"}`;
  const env = {
    HOME: SANDBOX_WORKSPACE,
    LANG: "C.UTF-8",
    TMPDIR: "/tmp",
    ...spec.env,
  };
  return {
    Image: settings.image,
    Entrypoint: ["/bin/sh"],
    Cmd: [
      "-c",
      PRELUDE,
      "remote-task",
      cwd,
      nonce,
      spec.command,
      spec.stdin === undefined ? "0" : "1",
    ],
    Env: Object.entries(env).map(([name, value]) => `${name}=${value}`),
    User: settings.user,
    Hostname: "sandbox",
    Labels: { ...settings.labels, [LABELS.sandboxId]: spec.sandboxId },
    AttachStdin: spec.stdin !== undefined,
    AttachStdout: true,
    AttachStderr: true,
    OpenStdin: spec.stdin !== undefined,
    StdinOnce: spec.stdin !== undefined,
    Tty: false,
    NetworkDisabled: true,
    HostConfig: {
      NetworkMode: "none",
      ...(settings.runtime === undefined ? {} : { Runtime: settings.runtime }),
      Memory: limits.memoryBytes,
      // No swap: the memory limit is the limit.
      MemorySwap: limits.memoryBytes,
      PidsLimit: limits.processes,
      ...(limits.cpus === undefined ? {} : { NanoCpus: Math.round(limits.cpus * 1e9) }),
      Ulimits: Object.entries({ ...settings.ulimits, nofile: limits.openFiles }).map(
        ([Name, value]) => ({ Name, Soft: value, Hard: value }),
      ),
      Tmpfs: {
        [SANDBOX_WORKSPACE]: tmpfs(limits.workspaceBytes),
        "/tmp": tmpfs(limits.tmpBytes),
      },
      ReadonlyRootfs: settings.readOnlyRootfs,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
      AutoRemove: false,
      LogConfig: { Type: "none" },
    },
  };
}
