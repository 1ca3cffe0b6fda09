import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { silentLogger } from "@remote-task/bridge";
import type { LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, cleanEnv, runCli, startTestBridge } from "./helpers.js";

/*
 * `--secrets` of run, run-detach, run-many and mcp against a real bridge that declares GH_TOKEN
 * (bubblewrap: the local backend injects secrets only there), and `health` listing it.
 */

const VALUE = `ghp_cli_${process.pid}_0123456789abcdef`;
const VARIABLE = `RT_CLI_TEST_GH_${process.pid}`;
const PLACEHOLDER = /^rt_secret_[0-9a-f]{32}$/;

/* The suite's API server and bridge: set up and torn down by its beforeAll and afterAll. */
let api: Server;
let apiPort: number;
const seen: IncomingHttpHeaders[] = [];
let bridge: EmbeddedBridge<LocalBackend>;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  api = createServer((req, res) => {
    seen.push(req.headers);
    res.end("api ok\n");
  });
  await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
  apiPort = (api.address() as AddressInfo).port;
  process.env[VARIABLE] = VALUE;
  bridge = await startEmbeddedBridge<LocalBackend>({
    // A loopback API stands for api.github.com: the deployer lets calls reach it.
    local: { isolation: "bwrap", egress: { allowPrivate: [`localhost:${apiPort}`] } },
    logger: silentLogger,
    secrets: {
      GH_TOKEN: { from: { env: VARIABLE }, hosts: [`localhost:${apiPort}`] },
      // Declared, its variable never set: the bridge cannot read its value.
      UNSET: { from: { env: `RT_CLI_TEST_UNSET_${process.pid}` }, hosts: ["api.example.com"] },
    },
  });
  env = cleanEnv({ CLOUDFLARE_SANDBOX_URL: bridge.url, CLOUDFLARE_SANDBOX_TOKEN: bridge.token });
});

afterAll(async () => {
  delete process.env[VARIABLE];
  await bridge?.close();
  api?.closeAllConnections();
  api?.close();
});

const curl = () => `curl -s -H "Authorization: Bearer $GH_TOKEN" http://localhost:${apiPort}/user`;

describe("run --secrets", () => {
  it("the command sees a placeholder; the API gets the value in the header", {
    timeout: 60_000,
  }, async () => {
    const before = seen.length;
    const { code, stdout, stderr } = await runCli(
      ["run", "--secrets", "GH_TOKEN", "--", `echo "$GH_TOKEN"; ${curl()}`],
      { env, timeoutMs: 60_000 },
    );
    expect(stderr).toBe("");
    expect(code).toBe(0);
    const [placeholder, answer] = stdout.split("\n");
    expect(placeholder).toMatch(PLACEHOLDER);
    expect(answer).toBe("api ok");
    expect(stdout).not.toContain(VALUE);
    expect(seen.slice(before).map((headers) => headers.authorization)).toEqual([`Bearer ${VALUE}`]);
  });

  it("without it the command has no such variable", async () => {
    const { code, stdout } = await runCli(["run", "--", 'echo "[$GH_TOKEN]"'], { env });
    expect(code).toBe(0);
    expect(stdout).toBe("[]\n");
  });

  it("a name the bridge does not declare is a usage error naming the declared ones", async () => {
    const { code, stdout, stderr } = await runCli(
      ["run", "--secrets", "GH_TOKEN,API_KEY", "--", "echo ran"],
      { env },
    );
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toBe(
      "remote-task: ForbiddenError: --secrets names API_KEY, which this bridge does not declare, so the command did not run; it declares GH_TOKEN, UNSET (remote-task health lists them with their hosts).\n",
    );
  });

  it("a secret whose value the bridge cannot read says so in the bridge's words (exit 125)", async () => {
    const { code, stdout, stderr } = await runCli(["run", "--secrets", "UNSET", "--", "echo ran"], {
      env,
    });
    expect(code).toBe(125);
    expect(stdout).toBe("");
    expect(stderr).toBe(
      "remote-task: BridgeError: The bridge cannot read the value of secret UNSET (its variable is unset or empty, or its file unreadable), so the command did not run. Its deployer must fix that where the bridge runs.\n",
    );
  });

  it("refuses a malformed name, and --secrets with the embedded bridge (which declares none)", async () => {
    const bad = await runCli(["run", "--secrets", "GH-TOKEN", "--", "true"], { env });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('"GH-TOKEN" is none');
    const local = await runCli(["run", "--local", "--secrets", "GH_TOKEN", "--", "true"]);
    expect(local.code).toBe(2);
    expect(local.stderr).toContain(
      "--secrets asks a bridge for secrets its deployer declared, and the embedded bridge of --local declares none",
    );
  });

  it("run --detach sends them too: attach prints the placeholder", {
    timeout: 60_000,
  }, async () => {
    const started = await runCli(
      ["run", "--detach", "--secrets", "GH_TOKEN", "--", 'echo "$GH_TOKEN"'],
      { env },
    );
    expect(started.stderr).toBe("");
    expect(started.code).toBe(0);
    const attached = await runCli(["attach", started.stdout.trim()], { env, timeoutMs: 60_000 });
    expect(attached.code).toBe(0);
    expect(attached.stdout.trim()).toMatch(PLACEHOLDER);
  });
});

describe("run-many --secrets and health", () => {
  it("run-many: every command gets its own placeholder", { timeout: 60_000 }, async () => {
    const { code, stdout } = await runCli(["run-many", "--secrets", "GH_TOKEN", "--json"], {
      env,
      input: 'echo "$GH_TOKEN"\necho "$GH_TOKEN"\n',
      timeoutMs: 60_000,
    });
    expect(code).toBe(0);
    const printed = (JSON.parse(stdout) as Array<{ result: { stdout: string } }>).map((task) =>
      task.result.stdout.trim(),
    );
    expect(printed).toHaveLength(2);
    for (const placeholder of printed) expect(placeholder).toMatch(PLACEHOLDER);
    expect(printed[0]).not.toBe(printed[1]);
  });

  it("run-many: an undeclared name stops the run once, as a usage error", async () => {
    const { code, stderr } = await runCli(["run-many", "--secrets", "API_KEY"], {
      env,
      input: "echo one\necho two\n",
    });
    expect(code).toBe(2);
    expect(stderr).toContain(
      "remote-task: ForbiddenError: --secrets names API_KEY, which this bridge does not declare",
    );
  });

  it("health lists the secrets' names and hosts, or says there are none", async () => {
    const declared = await runCli(["health"], { env });
    expect(declared.code).toBe(0);
    expect(declared.stdout).toMatch(
      new RegExp(
        `^secrets {12}GH_TOKEN \\(to localhost:${apiPort}\\); UNSET \\(to api\\.example\\.com\\)$`,
        "m",
      ),
    );
    expect(declared.stdout).not.toContain(VALUE);
    const plain = await startTestBridge();
    try {
      const none = await runCli(["health"], { env: plain.env });
      expect(none.stdout).toMatch(
        /^secrets {12}none declared \(nothing for --secrets to ask for\)$/m,
      );
    } finally {
      await plain.bridge.close();
    }
  });
});

describe("mcp --secrets", () => {
  it("offers the names to the model; a call listing one sees a placeholder", {
    timeout: 60_000,
  }, async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, "mcp", "--secrets", "GH_TOKEN"],
      env: env as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "cli-secrets-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      expect(tools[0]?.inputSchema.properties?.secrets).toMatchObject({
        items: { enum: ["GH_TOKEN"] },
      });
      expect(tools[0]?.description).toContain("`GH_TOKEN`");
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: 'echo "$GH_TOKEN"', secrets: ["GH_TOKEN"] },
      });
      const text = (result.content as Array<{ text: string }>)[0]?.text ?? "";
      expect(text.trim()).toMatch(PLACEHOLDER);
    } finally {
      await client.close();
    }
  });

  it("refuses a malformed name, and --secrets with --local, as usage errors", async () => {
    const bad = await runCli(["mcp", "--secrets", "GH-TOKEN"], { env });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('"GH-TOKEN" is none');
    const local = await runCli(["mcp", "--local", "--secrets", "GH_TOKEN"]);
    expect(local.code).toBe(2);
    expect(local.stderr).toContain("the embedded bridge of --local declares none");
  });
});
