import type { EmbeddedBridge } from "@remote-task/bridge/node";
import {
  type ClientOptions,
  ConfigurationError,
  clientFromEnv,
  createClient,
  isConfigured,
  type RemoteTaskClient,
} from "@remote-task/client";
import type { NetworkPolicy } from "@remote-task/protocol";
import { type DockerFlags, dockerBackendOptions } from "./docker.js";
import { warnIsolationNone } from "./isolation.js";
import { embeddedLogger } from "./log.js";
import { inFlagTerms } from "./report.js";
import { type LimitFlags, sandboxLimits } from "./sandbox-limits.js";
import { checkTokenSize } from "./token.js";
import { UsageError } from "./usage-error.js";

/** The bridges' default `limits.maxOutputBytes` (1 MiB). */
const DEFAULT_MAX_OUTPUT_BYTES = 1_048_576;

export interface ConnectionFlags extends DockerFlags, LimitFlags {
  /** Bytes of each output to keep; with `--local` or `--docker`, it may raise the bridge's cap. */
  maxOutputBytes?: number | undefined;
  url?: string;
  token?: string;
  cwd?: string;
  local?: boolean;
  isolation?: "auto" | "bwrap" | "none";
  timeout?: number;
  grace?: number;
  /** With `--local`, the network the embedded bridge lets the calls have (its ceiling). */
  network?: NetworkPolicy;
}

export interface Connection {
  client: RemoteTaskClient;
  close(): Promise<void>;
}

/** Client options from the timing flags (the grace default follows the task timeout). */
function timing(flags: ConnectionFlags): Partial<ClientOptions> {
  const options: Partial<ClientOptions> = {};
  if (flags.timeout !== undefined) options.timeoutSeconds = flags.timeout;
  if (flags.grace !== undefined) options.graceSeconds = flags.grace;
  return options;
}

/**
 * Starts the embedded local bridge in this process; `startEmbeddedBridge` creates its backend and
 * closes it again with the bridge. Whoever runs it is its deployer: the network asked for on the
 * command line is its ceiling, and the hosts it names may be private or loopback ones. Options it refuses (a `TypeError`) are a {@link UsageError}.
 */
export async function startBridgeFromFlags(
  flags: Pick<ConnectionFlags, "isolation" | "network" | "maxOutputBytes"> &
    DockerFlags &
    LimitFlags,
): Promise<EmbeddedBridge> {
  const { startEmbeddedBridge } = await import("@remote-task/bridge/node");
  const isolation = flags.isolation ?? "auto";
  const limits = sandboxLimits(flags);
  // Whoever starts it is its deployer: hosts named in --network may be private or loopback
  // (`localhost:8080`); the bridge itself stays out of reach.
  const egress =
    typeof flags.network === "object" ? { egress: { allowPrivate: flags.network.allow } } : {};
  const base = dockerBackendOptions(flags, limits);
  const docker = base === undefined ? undefined : { ...base, ...egress };
  if (docker === undefined && isolation === "none") warnIsolationNone();
  try {
    return await startEmbeddedBridge({
      ...(docker === undefined ? { local: { isolation, limits, ...egress } } : { docker }),
      // As deployer, --max-output-bytes above the default raises the embedded bridge's own cap.
      ...(flags.maxOutputBytes !== undefined && flags.maxOutputBytes > DEFAULT_MAX_OUTPUT_BYTES
        ? { limits: { maxOutputBytes: flags.maxOutputBytes } }
        : {}),
      logger: embeddedLogger,
      ...(flags.network === undefined ? {} : { network: { ceiling: flags.network } }),
    });
  } catch (error) {
    if (error instanceof TypeError) {
      throw new UsageError(inFlagTerms(error.message, EMBEDDED_FLAGS), { cause: error });
    }
    throw error;
  }
}

/** The embedded bridge's option names in its messages, and the flags that set them. */
const EMBEDDED_FLAGS = {
  "network.ceiling": "--network",
  "leave out the network option": "leave out --network",
};

/** The embedded bridge and a client for it; the bridge is closed again if the client fails. */
async function connectLocal(flags: ConnectionFlags): Promise<Connection> {
  const bridge = await startBridgeFromFlags(flags);
  let client: RemoteTaskClient;
  try {
    client = createClient({
      ...timing(flags),
      url: bridge.url,
      token: bridge.token,
      cwd: flags.cwd,
    });
  } catch (error) {
    await bridge.close();
    throw error;
  }
  return {
    client,
    async close() {
      await client.close();
      await bridge.close();
    },
  };
}

/**
 * A client for the flags: `--local` starts the embedded bridge in this process; `--url` (and
 * `--token`) point at a bridge; otherwise the CLOUDFLARE_SANDBOX_* variables are read.
 */
export async function connect(flags: ConnectionFlags): Promise<Connection> {
  if (flags.local || flags.docker !== undefined) return connectLocal(flags);
  const overrides: Partial<ClientOptions> = timing(flags);
  if (flags.url !== undefined) overrides.url = flags.url;
  if (flags.token !== undefined) {
    overrides.token = flags.token;
    overrides.tokenSource = "--token";
  }
  const token = flags.token ?? process.env.CLOUDFLARE_SANDBOX_TOKEN;
  if (token !== undefined) {
    try {
      checkTokenSize(token, flags.token === undefined ? "$CLOUDFLARE_SANDBOX_TOKEN" : "--token");
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  if (flags.cwd !== undefined) overrides.cwd = flags.cwd;
  try {
    const client = clientFromEnv(process.env, overrides);
    return { client, close: () => client.close() };
  } catch (error) {
    // The client names its option (`url is not a valid URL`); the user gave --url.
    if (ConfigurationError.isInstance(error) && flags.url !== undefined) {
      if (error.message.startsWith("url ")) {
        throw new UsageError(`--url${error.message.slice("url".length)}`, { cause: error });
      }
    }
    if (ConfigurationError.isInstance(error) && flags.url === undefined && !isConfigured()) {
      throw new ConfigurationError(
        `${error.message} Or pass --url <bridge URL> (and --token <token>), or --local to run on an embedded local bridge in this process.`,
        { cause: error },
      );
    }
    throw error;
  }
}
