import { once } from "node:events";
import type { LocalBackend } from "@remote-task/bridge/local";
import type { EmbeddedBridge } from "@remote-task/bridge/node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, runCli, startCli, startTestBridge } from "./helpers.js";

let bridge: EmbeddedBridge<LocalBackend>;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  ({ bridge, env } = await startTestBridge());
});
afterAll(async () => {
  await bridge?.close();
});

describe("durable calls from the command line", () => {
  it("run --detach prints the id; status shows it; attach prints its output and exit code", async () => {
    const started = await runCli(["run", "--detach", "--", "sleep 0.5; echo detached; exit 3"], {
      env,
    });
    expect(started.stderr).toBe("");
    expect(started.code).toBe(0);
    const sandboxId = started.stdout.trim();
    expect(sandboxId).toMatch(/^mikan-task-[0-9a-f-]+$/);

    const running = await runCli(["status", sandboxId], { env });
    expect(running.stdout).toMatch(/^(queued|running|finished)/);
    expect(running.code).toBe(0);

    const attached = await runCli(["attach", sandboxId], { env });
    expect(attached.stdout).toBe("detached\n");
    expect(attached.code).toBe(3);

    const finished = await runCli(["status", sandboxId, "--json"], { env });
    expect(JSON.parse(finished.stdout)).toMatchObject({
      sandboxId,
      state: "finished",
      result: { stdout: "detached\n", code: 3 },
    });
  });

  it("status of an id the bridge never had says unknown (exit 1); attach fails without running it", async () => {
    const status = await runCli(["status", "mikan-task-never-sent"], { env });
    expect(status.stdout).toBe("unknown\n");
    expect(status.code).toBe(1);
    const attached = await runCli(["attach", "mikan-task-never-sent", "--timeout", "5"], { env });
    expect(attached.code).toBe(125);
    expect(attached.stderr).toMatch(/no call mikan-task-never-sent/);
  });

  it("serve's flags set what its bridge keeps; health shows it", async () => {
    const server = startCli([
      "serve",
      "--local",
      "--isolation",
      "none",
      "--keep-seconds",
      "5",
      "--max-kept",
      "7",
      "--max-kept-bytes",
      "9000000",
      "--disconnect-grace",
      "3",
    ]);
    let out = "";
    server.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
    });
    while (!/CLOUDFLARE_SANDBOX_TOKEN=\S+/.test(out)) await once(server.stdout!, "data");
    const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(out)?.[1] ?? "";
    const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(out)?.[1] ?? "";
    const serveEnv = cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token });
    try {
      const health = await runCli(["health", "--json"], { env: serveEnv });
      expect(JSON.parse(health.stdout).durable).toMatchObject({
        keptSeconds: 5,
        maxKept: 7,
        maxKeptBytes: 9_000_000,
        disconnectGraceSeconds: 3,
      });
      const text = await runCli(["health"], { env: serveEnv });
      expect(text.stdout).toMatch(/durable calls\s+results kept 5 s \(at most 7 calls/);
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });

  it("refuses --detach with the embedded bridge, which would end with the program", async () => {
    const refused = await runCli(["run", "--local", "--detach", "--", "true"], { env });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--detach needs a bridge that outlives this program/);
  });
});
