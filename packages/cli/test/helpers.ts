import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { silentLogger } from "@remote-task/bridge";
import type { LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { onTestFinished } from "vitest";

export const BIN = fileURLToPath(new URL("../bin/remote-task.js", import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Environment without any bridge configuration from the machine running the tests. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/CLOUDFLARE_SANDBOX|MIKAN_/.test(key)) env[key] = value;
  }
  return { ...env, NO_COLOR: "1", ...extra };
}

export function startCli(args: string[], env: NodeJS.ProcessEnv = cleanEnv()): ChildProcess {
  return spawn(process.execPath, [BIN, ...args], { env, stdio: ["pipe", "pipe", "pipe"] });
}

/** Runs the built bin as users do and collects its output and exit code. */
export function runCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {},
): Promise<CliResult> {
  const child = startCli(args, options.env ?? cleanEnv());
  child.stdin?.end(options.input ?? "");
  return collectCli(child, args, options.timeoutMs);
}

/** The output and exit code of a started command line; killed when it runs past `timeoutMs`. */
export function collectCli(
  child: ChildProcess,
  args: string[],
  timeoutMs = 30_000,
): Promise<CliResult> {
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
  });
  child.stderr?.setEncoding("utf8").on("data", (d: string) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`remote-task ${args.join(" ")} did not finish; stderr: ${stderr}`));
    }, timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A loopback port with nothing listening on it. */
export async function closedPort(): Promise<number> {
  const server = createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, "close");
  return port;
}

/** The real embedded bridge, quiet, and an environment pointing the command line at it. */
export async function startTestBridge(): Promise<{
  bridge: EmbeddedBridge<LocalBackend>;
  env: NodeJS.ProcessEnv;
}> {
  const bridge = await startEmbeddedBridge({ logger: silentLogger });
  const env = cleanEnv({
    CLOUDFLARE_SANDBOX_URL: bridge.url,
    CLOUDFLARE_SANDBOX_TOKEN: bridge.token,
  });
  return { bridge, env };
}

/** A fresh temporary directory, removed when the test that asked for it ends. */
export async function testDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}
