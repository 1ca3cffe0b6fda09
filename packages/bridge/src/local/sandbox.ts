/**
 * One call's sandbox: from the call's spec to a running command. `startSandbox` takes a slot (a
 * uid and cgroups), makes the call's directories (isolation none) or its egress proxy (bubblewrap
 * with network), builds the spawn request (`spawnRequest`: the bubblewrap arguments or the plain
 * shell, the environment, the gate) and hands the command's output and exit to the bridge.
 */
import { chmodSync, chownSync } from "node:fs";
import { join } from "node:path";
import { BackendError, type ExecSpec, type RunningCommand } from "../backend.js";
import { refuseNul, resolveCwd } from "../host/cwd.js";
import { type EgressProxy, startEgressProxy } from "../host/egress.js";
import type { Endpoint } from "../host/egress-policy.js";
import {
  proxyEnvironment,
  relayPrelude,
  SANDBOX_NODE,
  SANDBOX_PROXY_SOCKET,
} from "../host/relay.js";
import { caEnvironment, SANDBOX_CA_BUNDLE } from "../host/sandbox-ca.js";
import { SANDBOX_WORKSPACE } from "../host/workspace.js";
import { bwrapArgs, isDirectoryInside } from "./bwrap.js";
import { ENV_FD } from "./keyring.js";
import { limitNotes } from "./notes.js";
import { mergeOutput } from "./output.js";
import { exitStatus, signal } from "./processes.js";
import type { LocalHost } from "./setup.js";
import { GATE_FD, shellScript } from "./shell.js";
import type { Slot } from "./slots.js";
import type { SandboxProcess, SpawnRequest } from "./spawner.js";
import { makeCallDirectories } from "./state-dir.js";

const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** After the command exits, how long leftover writers may keep its pipes open. */
const PIPE_DRAIN_MS = 1_000;

/** What one call's sandbox holds, from its start to its teardown. */
export interface Sandbox {
  slot?: Slot;
  /** Host directory of the call (isolation none). */
  root?: string;
  proc?: SandboxProcess;
  /** Host pid of the first process inside bubblewrap's PID namespace. */
  nsInit?: Promise<number | undefined>;
  /** Resolves once the child has exited (immediately when none was spawned). */
  exited: Promise<void>;
  /** Set when teardown found nothing of the sandbox left, not even a process to reap. */
  drained?: boolean;
  startup: Promise<unknown>;
  destroying?: Promise<void>;
  /** The egress proxy of a call with network `open` or an allowlist. */
  egress?: EgressProxy;
}

/** What a call adds to its backend's shared set-up. */
export interface CallContext {
  /** Sequence number of the call (names its directory and proxy socket). */
  serial: number;
  /** Where the bridge listens (never reachable through the egress proxy). */
  bridgeEndpoints: () => readonly Endpoint[];
  /** Stops the sandbox (SIGTERM, then SIGKILL), e.g. when the call's signal aborts. */
  stop: () => void;
  /** True once the backend is closed (no new sandbox starts). */
  closed: () => boolean;
}

/**
 * Isolation none: the plain shell, or (with a uid per sandbox) the shell started through the
 * fresh-keyrings program, which takes the command's environment on a pipe.
 */
function plainShell(
  host: LocalHost,
  argv: string[],
  env: Record<string, string>,
  uid: number | undefined,
): Pick<SpawnRequest, "file" | "args" | "env" | "extraPipes" | "inputs" | "uid"> {
  const asUid = uid === undefined ? {} : { uid };
  if (host.launch.keyrings === undefined)
    return { file: argv[0] as string, args: argv.slice(1), env, extraPipes: 1, ...asUid };
  const entries = Object.entries(env).map(([name, value]) => `${name}=${value}\0`);
  // With a private IPC namespace the program starts as root and takes the uid itself, after.
  const privateIpc = host.launch.keyrings.privateIpc && uid !== undefined;
  return {
    file: host.launch.keyrings.perl,
    args: ["-e", host.launch.keyrings.program, "--", ...(privateIpc ? [String(uid)] : []), ...argv],
    env: {},
    extraPipes: ENV_FD - 2,
    inputs: [{ fd: ENV_FD, data: entries.join("") }],
    ...(privateIpc ? {} : asUid),
  };
}

/** The call's request for the spawner: bubblewrap with its arguments, or the plain shell. */
function spawnRequest(
  host: LocalHost,
  spec: ExecSpec,
  call: {
    cwd: { inside: string };
    dirs: ReturnType<typeof makeCallDirectories> | undefined;
    binds: [string, string][];
    slot: Slot;
  },
): SpawnRequest {
  const { cwd, dirs, binds, slot } = call;
  const env: Record<string, string> = {
    PATH: SANDBOX_PATH,
    HOME: dirs?.workspace ?? SANDBOX_WORKSPACE,
    LANG: "C.UTF-8",
    TMPDIR: dirs?.tmp ?? "/tmp",
    ...(binds.length > 0 ? proxyEnvironment() : {}),
    ...(binds.some(([, inside]) => inside === SANDBOX_CA_BUNDLE) ? caEnvironment() : {}),
    ...spec.env,
  };
  const settings = ["--clearenv"];
  for (const [name, value] of Object.entries(env)) settings.push("--setenv", name, value);
  const request: SpawnRequest =
    host.isolation === "bwrap"
      ? {
          file: host.launch.bwrapPath,
          // The request's env reaches only the sandboxed command: bwrap itself runs on the host
          // with a bare PATH (a request's LD_PRELOAD must not load into it), and the variables
          // travel through a pipe (--args 3), not the command line that `ps` shows.
          args: [
            "--args",
            "3",
            ...bwrapArgs(host.launch.bwrapBase, {
              cwd: cwd.inside,
              binds,
              infoFd: 4,
              blockFd: 5,
              ...(host.launch.seccompFilter === undefined ? {} : { seccompFd: 6 }),
            }),
            "--",
            host.launch.shell.path,
            ...host.launch.shell.args,
            shellScript(spec.command, {
              gate: false,
              ulimits: host.launch.ulimits,
              setup: binds.length > 0 ? relayPrelude() : [],
              privileged: host.launch.shell.args.includes("-p"),
            }),
          ],
          cwd: host.stateDir,
          env: { PATH: SANDBOX_PATH },
          stdin: spec.stdin !== undefined,
          extraPipes: 4,
          inputs: [
            { fd: 3, data: `${settings.join("\0")}\0` },
            ...(host.launch.seccompFilter === undefined
              ? []
              : [{ fd: 6, data: host.launch.seccompFilter, base64: true }]),
          ],
          infoFd: 4,
          gate: { fd: 5, data: "x" },
          cgroups: slot.cgroup?.dirs ?? [],
        }
      : {
          ...plainShell(
            host,
            [
              host.launch.shell.path,
              ...host.launch.shell.args,
              shellScript(spec.command, {
                gate: true,
                ulimits: host.launch.ulimits,
                privileged: host.launch.shell.args.includes("-p"),
              }),
            ],
            env,
            slot.uid,
          ),
          cwd: dirs?.workspace ?? host.stateDir,
          stdin: spec.stdin !== undefined,
          gate: { fd: GATE_FD, data: "\n" },
          cgroups: slot.cgroup?.dirs ?? [],
        };
  if (host.isolation === "bwrap" && slot.uid !== undefined) request.uid = slot.uid;
  return request;
}

/** Starts the egress proxy of a call with network, reachable only by the slot's uid. */
async function startProxy(
  host: LocalHost,
  spec: ExecSpec,
  sandbox: Sandbox,
  slot: Slot,
  call: CallContext,
): Promise<[string, string][]> {
  const network = spec.network ?? "none";
  if (host.isolation !== "bwrap" || network === "none") return [];
  const socketPath = join(host.stateDir, `egress-${call.serial}.sock`);
  const secrets = spec.secrets ?? [];
  const caBundlePath =
    secrets.length > 0 ? join(host.stateDir, `egress-${call.serial}-ca.pem`) : undefined;
  sandbox.egress = await startEgressProxy({
    socketPath,
    caBundlePath,
    upstreamCa: host.upstreamCa,
    policy: network,
    callersAllowlist: spec.callersAllowlist === true,
    allowPrivate: host.allowPrivate,
    secrets: spec.secrets,
    protectedEndpoints: call.bridgeEndpoints,
  });
  if (slot.uid !== undefined) chownSync(socketPath, slot.uid, slot.uid);
  chmodSync(socketPath, 0o600);
  return [
    [socketPath, SANDBOX_PROXY_SOCKET],
    [process.execPath, SANDBOX_NODE],
    ...(caBundlePath === undefined ? [] : [[caBundlePath, SANDBOX_CA_BUNDLE] as [string, string]]),
  ];
}

/** Starts the call's command in a fresh sandbox; what it took is recorded in `sandbox`. */
export async function startSandbox(
  host: LocalHost,
  spec: ExecSpec,
  sandbox: Sandbox,
  call: CallContext,
): Promise<RunningCommand> {
  refuseNul(spec);
  const bwrap = host.isolation === "bwrap";
  const cwd = resolveCwd(spec.cwd, bwrap, (dir) => isDirectoryInside(dir, host.launch.etcEntries));
  await host.ready;
  if (call.closed()) throw new BackendError("sandbox_error", "The local backend is closed.");
  const slot = host.pool.acquire();
  if (slot === undefined) {
    throw new BackendError(
      "capacity_exceeded",
      `All ${host.uids?.count} sandbox uids are in use; try again when a call has ended.`,
      { retryAfterSeconds: 1 },
    );
  }
  sandbox.slot = slot;
  const dirs = bwrap
    ? undefined
    : makeCallDirectories(host.stateDir, String(call.serial), slot.uid);
  if (dirs !== undefined) sandbox.root = dirs.root;
  const countersBefore = slot.cgroup?.counters();
  if (spec.signal.aborted)
    throw new BackendError("sandbox_error", "The call ended before the command started.");

  const binds = await startProxy(host, spec, sandbox, slot, call);
  let proc: SandboxProcess;
  try {
    proc = await host.spawner.spawn(spawnRequest(host, spec, { cwd, dirs, binds, slot }));
  } catch (error) {
    throw new BackendError(
      "sandbox_error",
      `Could not start the command: ${(error as Error).message}`,
    );
  }
  sandbox.proc = proc;
  if (bwrap) sandbox.nsInit = proc.first;
  // A command that does not read its input ends with it unwritten: EPIPE here is no error.
  proc.stdin?.on("error", () => {});
  proc.stdin?.end(spec.stdin);
  const exit = proc.exit.then(({ code, signal: name, error }) => {
    if (error !== undefined)
      throw new BackendError("sandbox_error", `Could not confine the command: ${error}`);
    // Background processes the command left behind must not outlive it (or hold its pipes).
    signal(-proc.pid, "SIGKILL");
    slot.cgroup?.killNow();
    proc.stdin?.destroy();
    setTimeout(() => {
      proc.stdout.destroy();
      proc.stderr.destroy();
    }, PIPE_DRAIN_MS).unref();
    return exitStatus(code, name);
  });
  sandbox.exited = exit.then(
    () => {},
    () => {},
  );

  if (spec.signal.aborted) call.stop();
  else spec.signal.addEventListener("abort", call.stop, { once: true });

  return {
    output: mergeOutput(proc.stdout, proc.stderr, () =>
      limitNotes(exit, slot.cgroup, countersBefore, host.limits),
    ),
    exit,
  };
}
