import {
  type ClientOptions,
  clientFromEnv,
  createClient,
  type RemoteTaskClient,
} from "@remote-task/client";
import { cliLogger } from "./log.js";

export interface ConnectionFlags {
  url?: string;
  token?: string;
  cwd?: string;
  local?: boolean;
  isolation?: "auto" | "bwrap" | "none";
}

export interface Connection {
  client: RemoteTaskClient;
  close(): Promise<void>;
}

/**
 * A client for the flags: `--local` starts the embedded bridge in this process; `--url` (and
 * `--token`) point at a bridge; otherwise the CLOUDFLARE_SANDBOX_* variables are read.
 */
export async function connect(
  flags: ConnectionFlags,
  extra: Partial<ClientOptions> = {},
): Promise<Connection> {
  if (flags.local) {
    const [{ startLocalBridge }, { createLocalBackend }] = await Promise.all([
      import("@remote-task/bridge/node"),
      import("@remote-task/bridge/local"),
    ]);
    const bridge = await startLocalBridge({
      backend: createLocalBackend({ isolation: flags.isolation ?? "auto" }),
      logger: cliLogger(false),
    });
    const client = createClient({
      ...extra,
      url: bridge.url,
      token: bridge.token,
      cwd: flags.cwd,
    });
    return {
      client,
      async close() {
        await client.close();
        await bridge.close();
      },
    };
  }
  const overrides: Partial<ClientOptions> = { ...extra };
  if (flags.url !== undefined) overrides.url = flags.url;
  if (flags.token !== undefined) overrides.token = flags.token;
  if (flags.cwd !== undefined) overrides.cwd = flags.cwd;
  const client = clientFromEnv(process.env, overrides);
  return { client, close: () => client.close() };
}
