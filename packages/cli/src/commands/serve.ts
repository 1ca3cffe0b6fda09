import type { SecretDeclaration } from "@remote-task/bridge";
import type { DockerBackend } from "@remote-task/bridge/docker";
import type { LocalBackend } from "@remote-task/bridge/local";
import type { EmbeddedBridge } from "@remote-task/bridge/node";
import type { NetworkPolicy, SandboxReport } from "@remote-task/protocol";
import type { Command } from "commander";
import { type DockerFlags, dockerBackendOptions, dockerOptions } from "../docker.js";
import { EXIT } from "../exit-codes.js";
import { isolationOption, type OnExit, port, uidRange } from "../flags.js";
import { warnIsolationNone } from "../isolation.js";
import { serveLogger } from "../log.js";
import { hostList, networkPolicy } from "../network.js";
import { inFlagTerms } from "../report.js";
import { type LimitFlags, limitOptions, sandboxLimits } from "../sandbox-limits.js";
import { secretFlag } from "../secrets.js";
import { type ServeToken, serveToken } from "../token.js";
import { type DurableFlags, durableOptions, durableServeOptions } from "./durable-flags.js";

interface ServeFlags extends DockerFlags, LimitFlags, DurableFlags {
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
  corsOrigin?: string[];
  secret?: Record<string, SecretDeclaration>;
}

const MiB = 1024 * 1024;

/** The bridge's option names in its messages, and the flags of serve that set them. */
const SERVE_FLAGS = {
  "network.default": "--network-default",
  "network.ceiling": "--network-ceiling",
  "leave out the network option": "leave out --network-default and --network-ceiling",
  "egress.allowPrivate": "--allow-private",
  "leave out the secrets option": "leave out --secret (it needs --isolation bwrap or --docker)",
  "secrets.": "--secret ",
};

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

/** Serves the embedded bridge until SIGINT/SIGTERM, then shuts down gracefully. */
async function serveCommand(flags: ServeFlags): Promise<number> {
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
  const { startEmbeddedBridge } = await import("@remote-task/bridge/node");
  const network =
    flags.networkDefault === undefined && flags.networkCeiling === undefined
      ? undefined
      : { default: flags.networkDefault, ceiling: flags.networkCeiling };
  let bridge: EmbeddedBridge<LocalBackend | DockerBackend>;
  try {
    // The bridge creates its backend and closes it again when it closes.
    bridge = await startEmbeddedBridge<LocalBackend | DockerBackend>({
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
      ...(flags.secret === undefined ? {} : { secrets: flags.secret }),
      ...(flags.corsOrigin === undefined ? {} : { cors: { origins: flags.corsOrigin } }),
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
      (flags.secret === undefined
        ? ""
        : `secrets: ${Object.entries(flags.secret)
            .map(([name, secret]) => `${name} (to ${secret.hosts.join(", ")})`)
            .join("; ")}\n`) +
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

/** `remote-task serve`: its flags, help and handler. */
export function declareServe(program: Command, onExit: OnExit): void {
  limitOptions(dockerOptions(durableServeOptions(program.command("serve"))), "")
    .description("Serve the embedded bridge over HTTP: --local, or --docker IMAGE for containers.")
    .option(
      "--local",
      "serve the embedded bridge with the local backend (or --docker IMAGE for containers)",
    )
    .option("--port <port>", "port (0 picks a free one)", port, 0)
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option(
      "--token-file <path>",
      "read the bearer token to require from this file (default: $CLOUDFLARE_SANDBOX_TOKEN, else a random one)",
    )
    .option(
      "--token <token>",
      "bearer token to require; visible to every process on this machine, so prefer --token-file or $CLOUDFLARE_SANDBOX_TOKEN",
    )
    .addOption(isolationOption("isolation of the bridge's sandboxes"))
    .option(
      "--uids <first:count>",
      "host uids for sandboxes when run as root (default 1900000000:1024)",
      uidRange,
    )
    .option(
      "--network-default <policy>",
      "network of a call that names none: none, open or hosts (default none; under bwrap or --docker, not isolation none)",
      networkPolicy,
    )
    .option(
      "--network-ceiling <policy>",
      "the most network a call may ask for: none, open or hosts (default: the default)",
      networkPolicy,
    )
    .option(
      "--allow-private <hosts>",
      "private or loopback hosts calls with network may reach (e.g. 10.0.0.7:3141); never this bridge",
      hostList,
    )
    .option(
      "--secret <NAME=SOURCE@HOSTS>",
      "a secret calls may ask for by name: NAME=env:VAR@hosts or NAME=file:/path@hosts, optionally |Header: template with {value} (repeat for more); the command sees a placeholder, the value goes only into request headers to those hosts",
      secretFlag,
    )
    .option(
      "--cors-origin <origin>",
      "let browser pages of this web origin call the bridge (CORS; repeat for more, e.g. https://app.example.com); other origins are refused",
      (origin: string, previous: string[] = []) => [...previous, origin],
    )
    .addHelpText(
      "after",
      `
It serves until Ctrl-C.

Example, letting calls ask for the Python package index (and nothing else):
  $ remote-task serve --local --network-ceiling pypi.org,files.pythonhosted.org

Example, letting calls use a GitHub token they never hold (the value goes only to api.github.com):
  $ remote-task serve --local --secret 'GH_TOKEN=env:GH_TOKEN@api.github.com|Authorization: Bearer {value}'

Example, with tighter per-sandbox limits than the defaults:
  $ remote-task serve --local --processes 64 --memory-mib 512

Example, in two terminals: start it in one, paste the export line it prints into the other,
then run commands there:
  $ remote-task serve --local --port 8787
  $ export CLOUDFLARE_SANDBOX_URL=http://127.0.0.1:8787 CLOUDFLARE_SANDBOX_TOKEN=...
  $ remote-task run -- uname -a
Example, in one shell: choose the token yourself (serve reads $CLOUDFLARE_SANDBOX_TOKEN, so it
never shows in a command line) and serve in the background:
  $ export CLOUDFLARE_SANDBOX_URL=http://127.0.0.1:8787 CLOUDFLARE_SANDBOX_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')
  $ remote-task serve --local --port 8787 > /dev/null &
  $ remote-task run -- uname -a
  $ kill %1`,
    )
    .action(async (flags) => onExit(await serveCommand(flags)));
}
