import type { DockerBackend } from "@remote-task/bridge/docker";
import type { LocalBackend } from "@remote-task/bridge/local";
import type { LocalBridge } from "@remote-task/bridge/node";
import type { NetworkPolicy, SandboxReport } from "@remote-task/protocol";
import { type DockerFlags, dockerBackendOptions } from "../docker.js";
import { EXIT } from "../exit-codes.js";
import { warnIsolationNone } from "../isolation.js";
import { serveLogger } from "../log.js";
import { inFlagTerms } from "../report.js";
import { type LimitFlags, sandboxLimits } from "../sandbox-limits.js";
import { type ServeToken, serveToken } from "../token.js";
import { type DurableFlags, durableOptions } from "./durable-flags.js";

export interface ServeFlags extends DockerFlags, LimitFlags, DurableFlags {
  local?: boolean;
  port: number;
  host: string;
  token?: string;
  tokenFile?: string;
  isolation: "auto" | "bwrap" | "none";
  uids?: { first: number; count: number };
  networkDefault?: NetworkPolicy;
  networkCeiling?: NetworkPolicy;
  allowPrivate?: string[];
}

const MiB = 1024 * 1024;

/** The bridge's option names in its messages, and the flags of serve that set them. */
const SERVE_FLAGS = {
  "network.default": "--network-default",
  "network.ceiling": "--network-ceiling",
  "leave out the network option": "leave out --network-default and --network-ceiling",
  "egress.allowPrivate": "--allow-private",
};

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

/** Serves the embedded bridge until SIGINT/SIGTERM, then shuts down gracefully. */
export async function serveCommand(flags: ServeFlags): Promise<number> {
  if (!flags.local && flags.docker === undefined) {
    process.stderr.write(
      "remote-task: serve needs --local (the local backend) or --docker IMAGE (containers); deploy apps/worker for a Cloudflare bridge.\n",
    );
    return EXIT.usage;
  }
  let token: ServeToken;
  try {
    token = await serveToken(flags);
  } catch (error) {
    process.stderr.write(`remote-task: ${(error as Error).message}\n`);
    return EXIT.usage;
  }
  const egress =
    flags.allowPrivate === undefined ? {} : { egress: { allowPrivate: flags.allowPrivate } };
  const base = dockerBackendOptions(flags, sandboxLimits(flags));
  const docker = base === undefined ? undefined : { ...base, ...egress, logger: serveLogger };
  if (docker === undefined && flags.isolation === "none") warnIsolationNone();
  const { startLocalBridge } = await import("@remote-task/bridge/node");
  const network =
    flags.networkDefault === undefined && flags.networkCeiling === undefined
      ? undefined
      : { default: flags.networkDefault, ceiling: flags.networkCeiling };
  let bridge: LocalBridge<LocalBackend | DockerBackend>;
  try {
    // The bridge creates its backend and closes it again when it closes.
    bridge = await startLocalBridge<LocalBackend | DockerBackend>({
      docker,
      local: {
        isolation: flags.isolation,
        limits: sandboxLimits(flags),
        ...(flags.uids === undefined ? {} : { uids: flags.uids }),
        ...egress,
      },
      port: flags.port,
      host: flags.host,
      logger: serveLogger,
      durable: durableOptions(flags),
      ...(token.value === undefined ? {} : { token: token.value }),
      ...(network === undefined ? {} : { network }),
    });
  } catch (error) {
    // A limit or network setting the backend cannot take (e.g. network with isolation none).
    process.stderr.write(`remote-task: ${inFlagTerms((error as Error).message, SERVE_FLAGS)}\n`);
    return error instanceof TypeError ? EXIT.usage : EXIT.bridge;
  }
  const { backend } = bridge;
  if (!LOOPBACK.has(flags.host)) {
    process.stderr.write(
      `remote-task: warning: listening on ${flags.host}; anyone who can reach it with the token can run commands on this machine.\n`,
    );
  }
  // A token the deployer gave is not printed: it may be a secret used elsewhere too.
  const exportLine =
    token.from === undefined
      ? `export CLOUDFLARE_SANDBOX_URL=${bridge.url} CLOUDFLARE_SANDBOX_TOKEN=${bridge.token}`
      : `export CLOUDFLARE_SANDBOX_URL=${bridge.url}`;
  process.stdout.write(
    `remote-task ${backend.name} bridge on ${bridge.url} (backend ${backend.name}, isolation ${backend.isolation})\n` +
      `sandbox: ${describeSandbox(backend.sandbox)}\n` +
      `network: ${describeNetwork(network, backend.networkModes)}\n` +
      `token: ${token.from === undefined ? bridge.token : `from ${token.from}`}\n\n` +
      `${exportLine}\n\n` +
      "Press Ctrl-C to stop.\n",
  );
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  process.stderr.write("remote-task: stopping; cancelling running tasks...\n");
  await bridge.close();
  process.stderr.write("remote-task: stopped.\n");
  return EXIT.ok;
}

/** One line on how each sandbox is confined, as `/health` reports it. */
function describeSandbox(report: SandboxReport): string {
  const limit = (name: string, value: { max: number; by: string } | undefined, unit = 1) =>
    value === undefined ? `${name} not limited` : `${name} ${value.max / unit} (${value.by})`;
  return [
    report.user ?? "unknown user",
    limit("processes", report.processes),
    limit("memory MiB", report.memoryBytes, MiB),
    limit("/workspace MiB", report.workspaceBytes, MiB),
    limit("/tmp MiB", report.tmpBytes, MiB),
    `teardown ${report.teardown ?? "unknown"}`,
    ...(report.image === undefined
      ? []
      : [`image ${report.image} (${report.runtime ?? "runtime unknown"})`]),
  ].join(", ");
}

function policyText(policy: NetworkPolicy): string {
  return typeof policy === "string" ? policy : policy.allow.join(",");
}

/** The network line of the banner: what calls get by default and the most they may ask for. */
function describeNetwork(
  network: { default?: NetworkPolicy | undefined; ceiling?: NetworkPolicy | undefined } | undefined,
  modes: readonly string[] | undefined,
): string {
  if (modes === undefined || modes.length === 0) {
    return "not controlled (isolation none: commands share this machine's network)";
  }
  const fallback = network?.default ?? "none";
  return `default ${policyText(fallback)}, ceiling ${policyText(network?.ceiling ?? fallback)}`;
}
