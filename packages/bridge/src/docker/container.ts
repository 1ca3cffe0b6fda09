/**
 * What one call's container is: the create request the engine gets (image, limits, security,
 * labels: the same for every call, so a container can be made before its call), and the one-line
 * script its shell reads from stdin once the call is known: enter the cwd, set the env, report,
 * take the call's stdin, run the command.
 */

import type { ExecSpec } from "../backend.js";
import { checkPathLength, refuseNul } from "../host/cwd.js";
import type { SandboxLimits } from "../host/limits.js";
import { caEnvironment } from "../host/sandbox-ca.js";
import { SANDBOX_WORKSPACE } from "../host/workspace.js";

/** Per-container limits of the docker backend. */
export interface DockerLimits extends SandboxLimits {
  /** CPUs the container may use (fractions allowed); undefined: no CPU limit. */
  cpus?: number | undefined;
  /** The open-files limit (`nofile` ulimit, soft and hard) of every process. */
  openFiles: number;
}

/** Labels on every container this backend creates. */
export const LABELS = {
  /** The backend instance that owns it (see host/ownership.ts): a dead owner's are swept. */
  owner: "remote-task.owner",
  /** The machine the owner runs on: only a bridge on the same machine can tell it is dead. */
  host: "remote-task.host",
} as const;

/** A POSIX shell word that stands for `text` exactly. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/** The line the call's shell reports once in its cwd with its env set ({@link callScript}). */
export function readyMarker(nonce: string): string {
  return `remote-task:${nonce}:ready\n`;
}

/** The line the call's shell reports instead when its cwd does not exist. */
export function missingCwdMarker(nonce: string): string {
  return `remote-task:${nonce}:cwd-missing\n`;
}

/**
 * Where a call with secrets finds the CA bundle it trusts: the image's system bundle (the first
 * of {@link SYSTEM_BUNDLES} it has) and the certificate of the call's own CA. In /tmp because the
 * container's user may write only there and in the workspace; the image's bundle is not changed.
 */
export const CONTAINER_CA_BUNDLE = "/tmp/.remote-task-ca.pem";
/** System CA bundles (Debian and Alpine, RHEL, BSD-style), in the order they are looked for. */
const SYSTEM_BUNDLES = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/cert.pem",
];

/**
 * The lines that write {@link CONTAINER_CA_BUNDLE}: a here-document, so that the certificate
 * is no argument of any program and no variable of the command.
 */
function trustScript(certificatePem: string): string {
  const system = `for f in ${SYSTEM_BUNDLES.join(" ")}; do [ -r "$f" ] && { cat "$f"; echo; break; }; done`;
  return `{ ${system}; cat <<'REMOTE_TASK_CA'\n${certificatePem.trimEnd()}\nREMOTE_TASK_CA\n} > ${CONTAINER_CA_BUNDLE} 2>/dev/null\n`;
}

/**
 * The line the container's shell (`/bin/sh -s`) reads from stdin: enters the cwd or reports it
 * missing, exports the call's env, says it is ready (both reports go to stderr, first, where the
 * backend reads and removes them); with stdin, reads the rest of its input (which the backend
 * sends only after the report) into a file in /tmp that becomes the command's standard input and
 * is removed before the command runs, so the engine's stdin stream is drained whether or not the
 * command reads it (Podman drops a container's last output when its stdin write fails); then runs
 * the command with bash where the image has it, else with `/bin/sh`. One line: the shell has read
 * all of it before the report, and nothing after it. A call with secrets (`caCertificate`: its
 * CA) first writes its CA bundle, and its env points the usual variables there (its own env wins).
 */
export function callScript(
  spec: ExecSpec,
  cwd: string,
  nonce: string,
  caCertificate?: string | undefined,
): string {
  const say = (marker: string) => `printf '%s\\n' ${shellQuote(marker.trimEnd())} >&2`;
  const stdinFile = `/tmp/.remote-task-stdin-${nonce}`;
  const variables =
    caCertificate === undefined ? spec.env : { ...caEnvironment(CONTAINER_CA_BUNDLE), ...spec.env };
  const env = Object.entries(variables).map(([name, value]) => `${name}=${shellQuote(value)}`);
  const command = shellQuote(spec.command);
  const trust = caCertificate === undefined ? "" : trustScript(caCertificate);
  return `${trust}${[
    `cd -- ${shellQuote(cwd)} 2>/dev/null || { ${say(missingCwdMarker(nonce))}; exit 125; }`,
    ...(env.length === 0 ? [] : [`export ${env.join(" ")}`]),
    say(readyMarker(nonce)),
    ...(spec.stdin === undefined
      ? []
      : [`{ cat > ${stdinFile} && exec < ${stdinFile} && rm -f ${stdinFile}; } || exit 125`]),
    `[ -x /bin/bash ] && exec /bin/bash -c ${command}`,
    `exec /bin/sh -c ${command}`,
  ].join("; ")}\n`;
}

export interface ContainerSettings {
  image: string;
  /** The user of the next container made (`uid:gid` or a name of the image). */
  user: () => string;
  /**
   * The `seccomp=` security option's value: the profile's JSON (Docker), or the path of a file on
   * the engine's machine holding it (Podman 4 reads a path only).
   */
  seccomp: string;
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

/** The body of `POST /containers/create`: every call's container is made alike. */
export function createBody(settings: ContainerSettings): Record<string, unknown> {
  const { limits } = settings;
  const tmpfs = (bytes: number) =>
    `rw,exec,nosuid,nodev,size=${bytes},${settings.podman ? "U" : "mode=1777"}`;
  const env = { HOME: SANDBOX_WORKSPACE, LANG: "C.UTF-8", TMPDIR: "/tmp" };
  return {
    Image: settings.image,
    Entrypoint: ["/bin/sh"],
    Cmd: ["-s"],
    Env: Object.entries(env).map(([name, value]) => `${name}=${value}`),
    User: settings.user(),
    Hostname: "sandbox",
    Labels: settings.labels,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    OpenStdin: true,
    StdinOnce: true,
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
      SecurityOpt: ["no-new-privileges", `seccomp=${settings.seccomp}`],
      Privileged: false,
      AutoRemove: false,
      LogConfig: { Type: "none" },
    },
  };
}
