/**
 * Network policy for the docker backend. Every container is made with network `none`: it has only
 * a loopback interface and no route anywhere. A call with `open` or an allowlist gets the
 * shared egress proxy (host/egress.ts: the same decisions, the same private-range and
 * bridge-address refusals) on a unix socket of the host, and the shared relay
 * (host/relay.ts), run on the host inside the container's network namespace only
 * (`nsenter --net`), as an unprivileged uid, listening on the container's 127.0.0.1 and carrying
 * every connection to that socket by its path. The relay dies with the bridge (parent-death
 * signal) and is killed when the call ends. This needs the engine's containers on this very
 * kernel and the right to enter their namespaces: {@link probeContainerNetwork} says why not when
 * it cannot work, and the backend then enforces `none` only.
 */

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { accessSync, chmodSync, chownSync, constants, readFileSync, rmSync } from "node:fs";
import type { NetworkPolicy } from "@remote-task/protocol";
import { type EgressProxy, type EgressProxyOptions, startEgressProxy } from "../host/egress.js";
import type { Endpoint } from "../host/egress-policy.js";
import { proxyEnvironment, relayArgs } from "../host/relay.js";
import type { ParsedHostPattern } from "../network.js";
import type { EngineEndpoint } from "./engine.js";

/** The uid and gid the relay runs as on the host (nobody): it needs no right but its socket's. */
const RELAY_UID = 65534;
/** How long the relay may take to listen. */
const RELAY_START_MS = 10_000;

function which(name: string): string | undefined {
  const dirs = ["/usr/bin", "/bin", "/usr/sbin", "/sbin", ...(process.env.PATH ?? "").split(":")];
  for (const dir of dirs.filter((d) => d.startsWith("/"))) {
    try {
      accessSync(`${dir}/${name}`, constants.X_OK);
      return `${dir}/${name}`;
    } catch {}
  }
  return undefined;
}

/** The host programs that start a relay: nsenter, then setpriv (drop to nobody, die with us). */
interface RelayTools {
  nsenter: string;
  setpriv: string;
}

export type NetworkProbe = { tools: RelayTools } | { reason: string };

/** The command line that runs `program` (Node's arguments) in network namespace `netns`. */
function relayCommand(tools: RelayTools, netns: string, program: string[]): string[] {
  return [
    tools.nsenter,
    `--net=${netns}`,
    "--",
    tools.setpriv,
    `--reuid=${RELAY_UID}`,
    `--regid=${RELAY_UID}`,
    "--clear-groups",
    "--pdeathsig",
    "KILL",
    "--",
    process.execPath,
    ...program,
  ];
}

/**
 * Whether this bridge can run a relay in its containers' network namespaces: on Linux, with the
 * engine on a unix socket (so on this machine), a runtime whose containers use the kernel's
 * network stack (not gVisor's), nsenter and setpriv installed, and the right to enter a network
 * namespace (a trial run enters its own and starts Node as the relay's uid).
 */
export function probeContainerNetwork(
  endpoint: EngineEndpoint,
  runtime: string | undefined,
): NetworkProbe {
  if (process.platform !== "linux") {
    return {
      reason: "the bridge is not on Linux (the engine's containers run in a VM it cannot enter)",
    };
  }
  if (!("socketPath" in endpoint)) {
    return { reason: "the engine is reached over TCP (its containers may be on another machine)" };
  }
  if (runtime !== undefined && /runsc|gvisor|kata/i.test(runtime)) {
    return { reason: `runtime ${runtime} gives containers a network stack of its own` };
  }
  const nsenter = which("nsenter");
  const setpriv = which("setpriv");
  if (nsenter === undefined || setpriv === undefined) {
    return { reason: "nsenter and setpriv (util-linux) are not both installed" };
  }
  const tools = { nsenter, setpriv };
  // The trial runs the relay's whole chain, with a program that exits at once.
  const [file, ...args] = relayCommand(tools, "/proc/self/ns/net", ["-e", ""]);
  const tried = spawnSync(file as string, args, {
    encoding: "utf8",
    env: {},
    timeout: 10_000,
  });
  if (tried.status !== 0) {
    const why = (tried.stderr || tried.error?.message || `exit ${tried.status}`)
      .trim()
      .split("\n")[0];
    return {
      reason: `the bridge may not enter a network namespace and run ${process.execPath} as uid ${RELAY_UID} (it needs root; rootless Podman's containers are not on this host's namespaces): ${why}`,
    };
  }
  return { tools };
}

/** One call's network: its egress proxy and the relay in its container. */
export interface ContainerNetwork {
  /** The proxy variables the command gets. */
  env: Record<string, string>;
  /** With secrets: the sandbox CA's certificate (PEM) the container must trust. */
  caCertificate: string | undefined;
  /** Kills the relay and closes the proxy. Idempotent. */
  close(): Promise<void>;
}

export interface ContainerNetworkOptions {
  tools: RelayTools;
  /** The container's id and the host pid of its first process. */
  containerId: string;
  pid: number;
  policy: Exclude<NetworkPolicy, "none">;
  /** The allowlist is the caller's own (see ExecSpec.callersAllowlist). */
  callersAllowlist?: boolean | undefined;
  /** The call's secrets, for its proxy to put into headers to their hosts. */
  secrets?: EgressProxyOptions["secrets"];
  /** Extra CAs the proxy trusts upstream on the secrets' hosts (egress.upstreamCa). */
  upstreamCa?: string | undefined;
  /** The proxy's socket (its directory must let the relay's uid through). */
  socketPath: string;
  allowPrivate: readonly ParsedHostPattern[];
  protectedEndpoints: () => readonly Endpoint[];
}

/** The process `pid` is the container's (the engine's pids are this kernel's, not a VM's). */
function isContainersProcess(pid: number, containerId: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cgroup`, "utf8").includes(containerId);
  } catch {
    return false;
  }
}

/** Starts the call's proxy, then its relay; resolves once the relay listens in the container. */
export async function startContainerNetwork(
  options: ContainerNetworkOptions,
): Promise<ContainerNetwork> {
  const { pid, containerId, socketPath } = options;
  if (!Number.isSafeInteger(pid) || pid <= 0 || !isContainersProcess(pid, containerId)) {
    throw new Error(
      `the container's process (pid ${pid}) is not one of this host's; is the engine on another machine?`,
    );
  }
  const proxy: EgressProxy = await startEgressProxy({
    socketPath,
    policy: options.policy,
    callersAllowlist: options.callersAllowlist,
    secrets: options.secrets,
    upstreamCa: options.upstreamCa,
    allowPrivate: options.allowPrivate,
    protectedEndpoints: options.protectedEndpoints,
  });
  let relay: ChildProcess | undefined;
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      if (relay !== undefined && relay.exitCode === null && relay.signalCode === null) {
        const gone = new Promise((resolve) => relay?.once("close", resolve));
        relay.kill("SIGKILL");
        await gone;
      }
      await proxy.close();
      rmSync(socketPath, { force: true });
    })();
    return closing;
  };
  try {
    chownSync(socketPath, RELAY_UID, RELAY_UID);
    chmodSync(socketPath, 0o600);
    const [file, ...args] = relayCommand(
      options.tools,
      `/proc/${pid}/ns/net`,
      relayArgs(socketPath),
    );
    relay = spawn(file as string, args, { stdio: ["ignore", "pipe", "pipe"], env: {} });
    await relayReady(relay);
  } catch (error) {
    await close();
    throw error;
  }
  return { env: proxyEnvironment(), caCertificate: proxy.caCertificate, close };
}

/** Resolves when the relay says `ready`; rejects with what it said when it ends first. */
function relayReady(relay: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let said = "";
    const timer = setTimeout(() => fail("it did not listen within 10 s"), RELAY_START_MS);
    const fail = (why: string) => {
      clearTimeout(timer);
      reject(new Error(why));
    };
    const hear = (data: Buffer) => {
      said += data.toString("utf8");
      if (said.startsWith("ready")) {
        clearTimeout(timer);
        resolve();
      }
    };
    relay.stdout?.on("data", hear);
    relay.stderr?.on("data", (data: Buffer) => {
      said += data.toString("utf8");
    });
    relay.once("error", (error) => fail(error.message));
    relay.once("close", (code, signal) => {
      if (!said.startsWith("ready"))
        fail(`${said.trim() || "it ended"} (${signal ?? `exit ${code}`})`);
    });
  });
}
