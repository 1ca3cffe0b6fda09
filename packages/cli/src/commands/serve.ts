import { EXIT } from "../exit-codes.js";
import { cliLogger } from "../log.js";

export interface ServeFlags {
  local?: boolean;
  port: number;
  host: string;
  token?: string;
  isolation: "auto" | "bwrap" | "none";
}

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

/** Serves the embedded bridge until SIGINT/SIGTERM, then shuts down gracefully. */
export async function serveCommand(flags: ServeFlags): Promise<number> {
  if (!flags.local) {
    process.stderr.write(
      "remote-task: only `serve --local` is available here; deploy apps/worker for a Cloudflare bridge.\n",
    );
    return EXIT.usage;
  }
  const [{ startLocalBridge }, { createLocalBackend }] = await Promise.all([
    import("@remote-task/bridge/node"),
    import("@remote-task/bridge/local"),
  ]);
  const backend = createLocalBackend({ isolation: flags.isolation });
  const bridge = await startLocalBridge({
    backend,
    port: flags.port,
    host: flags.host,
    logger: cliLogger(true),
    ...(flags.token ? { token: flags.token } : {}),
  });
  if (!LOOPBACK.has(flags.host)) {
    process.stderr.write(
      `remote-task: warning: listening on ${flags.host}; anyone who can reach it with the token can run commands on this machine.\n`,
    );
  }
  process.stdout.write(
    `remote-task local bridge on ${bridge.url} (backend ${backend.name}, isolation ${backend.isolation})\n` +
      `token: ${bridge.token}\n\n` +
      `export CLOUDFLARE_SANDBOX_URL=${bridge.url} CLOUDFLARE_SANDBOX_TOKEN=${bridge.token}\n\n` +
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
