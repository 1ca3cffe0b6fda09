/**
 * The one MCP command, run by both `remote-task-mcp` and `remote-task mcp`: its flags, the bridge
 * it talks to (the environment, `--url`/`--token`, or an embedded one with `--local` or
 * `--docker`), the tool's MCP server on stdio, and a clean end when the MCP client closes our
 * input. The MCP SDK is loaded only here (see mcp-loader.ts).
 */
import { parseArgs } from "node:util";
import type { NetworkPolicy } from "@remote-task/protocol";
import { loadMcpServer } from "./mcp-loader.js";
import { networkFromFlag } from "./network.js";
import { secretNamesFromFlag } from "./secrets.js";

function usage(program: string): string {
  return `Usage: ${program} [--local [--isolation auto|bwrap|none] | --docker <image>] [--url <url>] [--token <token>] [--network <policy>] [--secrets <names>]

Serves the remote_task tool over the Model Context Protocol on stdio, for an MCP client to start.
The bridge comes from CLOUDFLARE_SANDBOX_URL (and CLOUDFLARE_SANDBOX_TOKEN, CLOUDFLARE_SANDBOX_CWD).

Options:
  --local              start the embedded local bridge in this process instead; it stops
                       when the session ends
  --isolation <mode>   with --local: auto (default), bwrap or none
  --docker <image>     start the embedded bridge with each call in a fresh container of this
                       image on Docker or Podman
  --docker-runtime <name>
                       with --docker: the engine's runtime, e.g. runsc
  --docker-engine <address>
                       with --docker: unix:///path.sock or tcp://host:port (default: $DOCKER_HOST,
                       then the usual sockets)
  --docker-user <user> with --docker: who commands run as in the container (default: a uid of
                       its own per container, no host account)
  --docker-ulimit <name=value[,name=value...]>
                       with --docker: more rlimits for the containers, e.g. nproc=32768 where
                       the engine's default is too high for it
  --url <url>          the bridge's URL (instead of $CLOUDFLARE_SANDBOX_URL)
  --token <token>      the bridge's token (prefer $CLOUDFLARE_SANDBOX_TOKEN: arguments are
                       visible to every process on the machine)
  --network <policy>   where every call's command may connect: none, open, or hosts separated
                       by commas; the model cannot change it
  --secrets <names>    secrets of the bridge the model may use, by name (NAME[,NAME...], repeat
                       for more): the tool offers them as its optional "secrets" parameter, and
                       a command asking for one sees a placeholder in $NAME, never the value;
                       the bridge must declare them (remote-task serve --secret), so not with
                       --local or --docker
  -h, --help           show this help

Example MCP client configuration:
  {"mcpServers": {"remote-task": {"command": "${program.split(" ")[0]}", "args": [${program.includes(" ") ? '"mcp"' : ""}],
    "env": {"CLOUDFLARE_SANDBOX_URL": "https://bridge.example.workers.dev",
            "CLOUDFLARE_SANDBOX_TOKEN": "..."}}}}
With the embedded bridge instead, add "--local" to "args"; to limit every call to the Python
package index, add "--network", "pypi.org,files.pythonhosted.org"; to let the model use the
bridge's GH_TOKEN, add "--secrets", "GH_TOKEN".
`;
}

type Isolation = "auto" | "bwrap" | "none";

interface Embedded {
  isolation: Isolation;
  docker?:
    | {
        image: string;
        runtime?: string | undefined;
        engine?: string | undefined;
        user?: string | undefined;
        ulimits?: Record<string, number> | undefined;
      }
    | undefined;
}

/** `--docker-ulimit name=value[,name=value...]`, given once or more. */
function ulimitsFromFlags(
  values: readonly string[] | undefined,
): Record<string, number> | undefined {
  if (values === undefined) return undefined;
  const ulimits: Record<string, number> = {};
  for (const item of values.flatMap((value) => value.split(","))) {
    const match = /^([a-z]+)=(\d+)$/.exec(item.trim());
    if (match === null) {
      throw new TypeError(
        `--docker-ulimit expects name=value[,name=value...], e.g. nproc=32768; got "${item}".`,
      );
    }
    ulimits[match[1] as string] = Number(match[2]);
  }
  return ulimits;
}

/** A usage error: one line and where the usage is, never the whole help (exit 2). */
function usageError(program: string, message: string): number {
  process.stderr.write(`${program}: ${message}\n(${program} --help shows usage)\n`);
  return 2;
}

/** The embedded bridge; `startEmbeddedBridge` owns its backend and closes it with the bridge. */
async function startMcpBridge({ isolation, docker }: Embedded) {
  const { startEmbeddedBridge } = await import("@remote-task/bridge/node");
  return startEmbeddedBridge({
    ...(docker === undefined ? { local: { isolation } } : { docker }),
    // stdout is the MCP channel. The tool reports each call's failure to the model; only what
    // it cannot see (an unexpected backend failure, a failed cleanup) goes to stderr.
    logger: (entry) => {
      if (entry.detail !== undefined) {
        process.stderr.write(`remote-task: embedded bridge: ${entry.event}: ${entry.detail}\n`);
      }
    },
  });
}

/**
 * Runs the MCP command with `args` (the words after the program name); `program` names it in
 * messages. Resolves with the exit code once the server is up (it serves until stdin closes).
 */
export async function runMcpCommand(args: readonly string[], program: string): Promise<number> {
  let flags: {
    local?: boolean | undefined;
    isolation?: string | undefined;
    docker?: string | undefined;
    "docker-runtime"?: string | undefined;
    "docker-engine"?: string | undefined;
    "docker-user"?: string | undefined;
    "docker-ulimit"?: string[] | undefined;
    url?: string | undefined;
    token?: string | undefined;
    network?: string | undefined;
    secrets?: string[] | undefined;
    help?: boolean | undefined;
  };
  let network: NetworkPolicy | undefined;
  let secrets: string[] | undefined;
  let ulimits: Record<string, number> | undefined;
  try {
    flags = parseArgs({
      args: [...args],
      options: {
        local: { type: "boolean" },
        isolation: { type: "string" },
        docker: { type: "string" },
        "docker-runtime": { type: "string" },
        "docker-engine": { type: "string" },
        "docker-user": { type: "string" },
        "docker-ulimit": { type: "string", multiple: true },
        url: { type: "string" },
        token: { type: "string" },
        network: { type: "string" },
        secrets: { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
    }).values;
    if (flags.isolation !== undefined && !["auto", "bwrap", "none"].includes(flags.isolation)) {
      throw new TypeError(`--isolation must be auto, bwrap or none, not "${flags.isolation}".`);
    }
    if (flags.isolation !== undefined && !flags.local) {
      throw new TypeError("--isolation applies only with --local (the embedded bridge).");
    }
    if (flags.local && flags.docker !== undefined) {
      throw new TypeError("--local and --docker name two embedded bridges: give one.");
    }
    const dockerOnly = ["docker-runtime", "docker-engine", "docker-user", "docker-ulimit"] as const;
    const given = dockerOnly.filter((name) => flags[name] !== undefined);
    if (given.length > 0 && flags.docker === undefined) {
      throw new TypeError(
        `${given.map((name) => `--${name}`).join(" and ")} ${given.length === 1 ? "applies" : "apply"} only with --docker <image>.`,
      );
    }
    ulimits = ulimitsFromFlags(flags["docker-ulimit"]);
    const embedded = flags.local || flags.docker !== undefined;
    if (embedded && flags.url !== undefined) {
      throw new TypeError(
        `--url and --${flags.local ? "local" : "docker"} name two bridges: give one.`,
      );
    }
    if (flags.network !== undefined) network = networkFromFlag(flags.network);
    if (flags.secrets !== undefined) {
      if (embedded) {
        throw new TypeError(
          `--secrets asks a bridge for secrets its deployer declared, and the embedded bridge of --${flags.local ? "local" : "docker"} declares none; serve one with remote-task serve --secret NAME=env:VAR@HOSTS and point --url (or $CLOUDFLARE_SANDBOX_URL) at it.`,
        );
      }
      secrets = [];
      for (const value of flags.secrets) secrets = secretNamesFromFlag(value, secrets);
    }
  } catch (error) {
    return usageError(program, (error as Error).message);
  }
  if (flags.help) {
    process.stdout.write(usage(program));
    return 0;
  }
  const { runMcpStdio } = await loadMcpServer();
  let bridge: Awaited<ReturnType<typeof startMcpBridge>> | undefined;
  try {
    bridge =
      flags.local || flags.docker !== undefined
        ? await startMcpBridge({
            isolation: (flags.isolation ?? "auto") as Isolation,
            docker:
              flags.docker === undefined
                ? undefined
                : {
                    image: flags.docker,
                    runtime: flags["docker-runtime"],
                    engine: flags["docker-engine"],
                    user: flags["docker-user"],
                    ulimits,
                  },
          })
        : undefined;
  } catch (error) {
    // A value the embedded bridge refuses (a ulimit no engine knows, an engine address of
    // another form) is a usage error, as in `remote-task serve`.
    if (error instanceof TypeError) return usageError(program, error.message);
    throw error;
  }
  const target = bridge ?? { url: flags.url, token: flags.token };
  const env = { ...process.env };
  if (target.url !== undefined) env.CLOUDFLARE_SANDBOX_URL = target.url;
  if (target.token !== undefined) env.CLOUDFLARE_SANDBOX_TOKEN = target.token;
  try {
    const server = await runMcpStdio({ env, network, secrets });
    // The session ends when the MCP client closes our input: the server closes its client, and
    // the embedded bridge closes with its backend.
    if (bridge) process.stdin.once("end", () => void server.close().then(() => bridge.close()));
  } catch (error) {
    await bridge?.close();
    throw error;
  }
  return 0;
}
