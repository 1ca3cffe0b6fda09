import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import { createServer as createHttpServer, type Server } from "node:http";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { LocalBackend } from "@remote-task/bridge/local";
import type { EmbeddedBridge } from "@remote-task/bridge/node";
import { execResultSchema, PROTOCOL_VERSION } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BIN,
  cleanEnv,
  closedPort,
  collectCli,
  runCli,
  startCli,
  startTestBridge,
  testDir,
} from "./helpers.js";

let bridge: EmbeddedBridge<LocalBackend>;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  ({ bridge, env } = await startTestBridge());
});
afterAll(async () => {
  await bridge?.close();
});

describe("usage", () => {
  it.each(["run", "run-many", "serve", "health", "mcp", "attach", "status"])(
    "%s --help shows examples",
    async (cmd) => {
      const { code, stdout } = await runCli([cmd, "--help"]);
      expect(code).toBe(0);
      expect(stdout).toContain("Usage: remote-task");
      expect(stdout).toMatch(/Example/);
    },
  );

  it("serve --help says a network policy needs bwrap or --docker (the docker backend enforces one too)", async () => {
    const { stdout } = await runCli(["serve", "--help"]);
    expect(stdout.replace(/\s+/g, " ")).toContain("under bwrap or --docker, not isolation none");
  });

  it("prints its version", async () => {
    const { code, stdout } = await runCli(["--version"]);
    expect(code).toBe(0);
    expect(stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("refuses an unknown flag with a usage error", async () => {
    const { code, stderr } = await runCli(["health", "--bogus"]);
    expect(code).toBe(2);
    expect(stderr).toContain("unknown option '--bogus'");
  });

  it("no arguments: the usage on stderr and exit 2; help asked for is exit 0 on stdout", async () => {
    const bare = await runCli([]);
    expect(bare.code).toBe(2);
    expect(bare.stdout).toBe("");
    expect(bare.stderr).toContain("Usage: remote-task");
    const asked = await runCli(["help"]);
    expect(asked.code).toBe(0);
    expect(asked.stdout).toContain("Usage: remote-task");
  });

  it("errors name the flags, not the API options", async () => {
    const url = await runCli(["run", "--url", "bogus", "--", "true"], { env: cleanEnv() });
    expect(url.code).toBe(2);
    expect(url.stderr).toContain("--url is not a valid URL");
    const network = await runCli(
      ["serve", "--local", "--network-default", "open", "--network-ceiling", "none"],
      { env: cleanEnv() },
    );
    expect(network.code).toBe(2);
    expect(network.stderr).toContain(
      "--network-default (open) is wider than --network-ceiling (none)",
    );
    const engine = await runCli(["run", "--docker", "img", "--", "true"], {
      env: cleanEnv({ DOCKER_HOST: "" }),
    });
    if (!engine.stderr.includes("cannot be reached")) {
      expect(engine.stderr).toContain("--docker-engine unix:///path.sock");
    }
  });

  it("a token too long for an HTTP header is refused before sending, naming where it came from", async () => {
    const token = "a".repeat(100_000);
    const flag = await runCli(
      ["run", "--url", "http://127.0.0.1:1", "--token", token, "--", "true"],
      {
        env: cleanEnv(),
      },
    );
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("the token from --token is 100000 bytes");
    expect(flag.stderr).not.toContain("malformed");
    const variable = await runCli(["health", "--url", "http://127.0.0.1:1"], {
      env: cleanEnv({ CLOUDFLARE_SANDBOX_TOKEN: token }),
    });
    expect(variable.code).toBe(2);
    expect(variable.stderr).toContain("the token from $CLOUDFLARE_SANDBOX_TOKEN is 100000 bytes");
  });

  it("refuses a missing command", async () => {
    const { code, stderr } = await runCli(["run"]);
    expect(code).toBe(2);
    expect(stderr).toContain("missing required argument 'command'");
  });

  it("refuses an older Node.js with the version it needs", async () => {
    const oldNode = `data:text/javascript,${encodeURIComponent(
      `Object.defineProperty(process, "versions", { value: { ...process.versions, node: "20.20.2" } });`,
    )}`;
    const child = spawn(process.execPath, ["--import", oldNode, BIN, "run", "--", "true"]);
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    const [code] = await once(child, "exit");
    expect(code).toBe(125);
    expect(stderr).toBe("remote-task needs Node.js >= 22.19.0; this is Node.js 20.20.2.\n");
  });

  it("refuses a bad timeout", async () => {
    const { code, stderr } = await runCli(["run", "--timeout", "soon", "--", "true"]);
    expect(code).toBe(2);
    expect(stderr).toContain("expected a number > 0");
  });
});

describe("run", () => {
  it("routes stdout and stderr and exits with the remote code", async () => {
    const { code, stdout, stderr } = await runCli(["run", "--", "echo out; echo err >&2; exit 3"], {
      env,
    });
    expect(stdout).toBe("out\n");
    expect(stderr).toBe("err\n");
    expect(code).toBe(3);
  });

  it("runs several words as a command and its arguments", async () => {
    const { code, stdout } = await runCli(["run", "echo", "a", "b"], { env });
    expect(stdout).toBe("a b\n");
    expect(code).toBe(0);
  });

  it("keeps each of several words one argument, as docker exec does", async () => {
    const exit = await runCli(["run", "--", "sh", "-c", "exit 7"], { env });
    expect(exit.code).toBe(7);
    const spaced = await runCli(["run", "--", "echo", "a   b"], { env });
    expect(spaced.stdout).toBe("a   b\n");
    const quoted = await runCli(["run", "--", "printf", "%s|", "it's", "$HOME", "*"], { env });
    expect(quoted.stdout).toBe("it's|$HOME|*|");
  });

  it("runs one word as a shell command line, pipes included", async () => {
    const { code, stdout } = await runCli(["run", "--", "echo a b | tr a-z A-Z; exit 3"], { env });
    expect(stdout).toBe("A B\n");
    expect(code).toBe(3);
  });

  it("refuses a relative --cwd as a usage error and exits, with --local too", async () => {
    for (const args of [
      ["run", "--local", "--cwd", "sub", "--", "pwd"],
      ["run", "--cwd", "sub", "--", "pwd"],
    ]) {
      const { code, stderr } = await runCli(args, { env, timeoutMs: 20_000 });
      expect(code).toBe(2);
      expect(stderr).toContain("expected an absolute path");
    }
  });

  it("exits 2 naming --timeout when the bridge refuses the timeout", async () => {
    const { code, stderr } = await runCli(["run", "--timeout", "99999", "--", "true"], { env });
    expect(code).toBe(2);
    expect(stderr).toContain("InvalidRequestError");
    expect(stderr).toContain("timeoutSeconds");
    expect(stderr).toContain("Check --timeout.");
  });

  it("refuses --isolation without --local", async () => {
    for (const cmd of [
      ["run", "--isolation", "none", "--", "true"],
      ["health", "--isolation", "none"],
    ]) {
      const { code, stderr } = await runCli(cmd, { env });
      expect(code).toBe(2);
      expect(stderr).toContain("--isolation applies only with --local");
    }
    const { code, stdout } = await runCli([
      "run",
      "--local",
      "--isolation",
      "none",
      "--",
      "echo ok",
    ]);
    expect(stdout).toBe("ok\n");
    expect(code).toBe(0);
  });

  it("exits 124 on timeout and says so", async () => {
    const { code, stderr } = await runCli(
      ["run", "--timeout", "1", "--", "echo started; sleep 30"],
      {
        env,
      },
    );
    expect(code).toBe(124);
    expect(stderr).toContain("Command timed out after 1 second.\n");
  });

  it("prints a schema-valid result with --json", async () => {
    const { code, stdout } = await runCli(["run", "--json", "--", "printf hi; exit 4"], { env });
    expect(code).toBe(4);
    const parsed = JSON.parse(stdout);
    expect(execResultSchema.parse(parsed)).toMatchObject({
      stdout: "hi",
      code: 4,
      outcome: "exited",
    });
    expect(parsed.sandboxId).toMatch(/^mikan-task-/);
  });

  it("streams output with --stream", async () => {
    const { code, stdout, stderr } = await runCli(
      ["run", "--stream", "--", "echo one; echo two >&2; echo three"],
      { env },
    );
    expect(code).toBe(0);
    expect(stdout).toBe("one\nthree\n");
    expect(stderr).toBe("two\n");
  });

  it("runs on the embedded bridge with --local", async () => {
    const { code, stdout } = await runCli(["run", "--local", "--", "uname -s; pwd"]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^Linux\n\/workspace\n$/);
  });

  it("fails with 125 naming the variable, --url and --local when no bridge is configured", async () => {
    const { code, stderr } = await runCli(["run", "--", "true"]);
    expect(code).toBe(125);
    expect(stderr).toContain("CLOUDFLARE_SANDBOX_URL is not set");
    expect(stderr).toContain("--url <bridge URL>");
    expect(stderr).toContain("--local");
  });

  it("fails with 125 on a wrong token, without echoing it", async () => {
    const { code, stderr } = await runCli(
      ["run", "--url", bridge.url, "--token", "wrong-secret-token", "--", "true"],
      { env: cleanEnv() },
    );
    expect(code).toBe(125);
    expect(stderr).toContain("AuthenticationError");
    expect(stderr).not.toContain("wrong-secret-token");
  });
});

// After the deadline the client still gives its best-effort cancel up to 5 s before closing.
describe("a bridge that accepts connections and never answers", () => {
  let silent: Server;
  let silentUrl: string;
  beforeAll(async () => {
    silent = createHttpServer(() => {}).listen(0, "127.0.0.1");
    await once(silent, "listening");
    silentUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
  });
  afterAll(() => {
    silent.closeAllConnections();
    silent.close();
  });

  it("gives up after --timeout plus --grace and says which flags to raise", async () => {
    const { code, stderr } = await runCli(
      ["run", "--url", silentUrl, "--timeout", "1", "--grace", "0.5", "--", "true"],
      { env: cleanEnv() },
    );
    expect(code).toBe(125);
    expect(stderr).toContain("TimeoutError");
    expect(stderr).toContain("within 1.5s");
    expect(stderr).toContain("--grace <seconds>");
  }, 40_000);

  it("waits a grace in proportion to a short timeout by default (10 s, not 30 s)", async () => {
    const { code, stderr } = await runCli(
      ["run", "--url", silentUrl, "--timeout", "0.5", "--", "true"],
      { env: cleanEnv() },
    );
    expect(code).toBe(125);
    expect(stderr).toContain("within 10.5s");
  }, 40_000);
});

describe("interrupt", () => {
  it("Ctrl-C cancels the remote command and exits 130", async () => {
    const child = startCli(["run", "--stream", "--", "echo started; sleep 30"], env);
    let out = "";
    let err = "";
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      err += d;
    });
    child.stdout?.setEncoding("utf8");
    await new Promise<void>((resolve) => {
      child.stdout?.on("data", (d: string) => {
        out += d;
        if (out.includes("started")) resolve();
      });
    });
    expect(bridge.backend.liveSandboxes()).toBe(1);
    child.kill("SIGINT");
    const [code] = await once(child, "exit");
    expect(code).toBe(130);
    expect(err).toContain("interrupted");
    const until = Date.now() + 10_000;
    while (bridge.backend.liveSandboxes() > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(bridge.backend.liveSandboxes()).toBe(0);
  });

  it("Ctrl-C without --stream shows the output that arrived", async () => {
    const child = startCli(["run", "--", "echo started; echo warn >&2; sleep 30"], env);
    let out = "";
    let err = "";
    child.stdout?.setEncoding("utf8").on("data", (d: string) => {
      out += d;
    });
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      err += d;
    });
    const until = Date.now() + 15_000;
    while (bridge.backend.liveSandboxes() === 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // The output is printed at once by the command; give it time to reach the CLI.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(out).toBe("");
    child.kill("SIGINT");
    const [code] = await once(child, "exit");
    expect(code).toBe(130);
    expect(out).toBe("started\n");
    expect(err).toContain("warn\n");
    expect(err).toContain("interrupted");
  });
});

describe("run --json when the call fails", () => {
  it("prints one JSON object with the error on stdout, and the line on stderr", async () => {
    const port = await closedPort();
    const { code, stdout, stderr } = await runCli(
      ["run", "--json", "--url", `http://127.0.0.1:${port}`, "--token", "t", "--", "true"],
      { env: cleanEnv() },
    );
    expect(code).toBe(125);
    const body = JSON.parse(stdout);
    expect(body.error).toMatchObject({ name: "ConnectionError", mayHaveRun: false });
    expect(body.error.message).toMatch(/nothing was sent/);
    expect(stderr).toContain("remote-task: ConnectionError:");
  });
});

describe("interrupt: what the output says", () => {
  /** Waits until the test bridge runs `n` sandboxes. */
  async function running(n: number): Promise<void> {
    const until = Date.now() + 15_000;
    while (bridge.backend.liveSandboxes() < n && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(bridge.backend.liveSandboxes()).toBeGreaterThanOrEqual(n);
  }

  it("SIGTERM is 'terminated' and exit 143, not 'interrupted' 130", async () => {
    const child = startCli(["run", "--", "sleep 30"], env);
    child.stdin?.end();
    const result = collectCli(child, ["run"]);
    await running(1);
    child.kill("SIGTERM");
    const { code, stderr } = await result;
    expect(code).toBe(143);
    expect(stderr).toContain(
      "remote-task: terminated (SIGTERM); the remote command was cancelled.",
    );
    expect(stderr).not.toContain("interrupted");
  });

  it("run-many Ctrl-C: one line for the interrupt, unstarted tasks counted as stopped, not failed", async () => {
    const input = Array.from({ length: 40 }, (_, i) => `sleep 30 # ${i}`).join("\n");
    const child = startCli(["run-many", "--concurrency", "2"], env);
    child.stdin?.end(input);
    const result = collectCli(child, ["run-many"]);
    await running(2);
    child.kill("SIGINT");
    const { code, stdout, stderr } = await result;
    expect(code).toBe(130);
    expect(stderr).not.toContain("AbortError");
    expect(stdout.split("\n").filter((line) => line.endsWith(" (stopped)"))).toHaveLength(40);
    expect(stderr).toContain(
      "remote-task: interrupted: 40 tasks stopped or never sent; for those that had started, the remote command was cancelled.",
    );
    expect(stderr).toMatch(/40 tasks, 0 succeeded, 0 failed, 40 stopped or never sent in /);
  });

  it("Ctrl-C against a bridge without /cancel (the reference): says the command keeps running", async () => {
    const server = createHttpServer((req, res) => {
      if (req.url === "/cancel") {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: "Not found" }));
      }
      // POST /exec is never answered: the command runs on.
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      const child = startCli(
        [
          "run",
          "--url",
          `http://127.0.0.1:${port}`,
          "--token",
          "t",
          "--timeout",
          "30",
          "--",
          "sleep 20",
        ],
        cleanEnv(),
      );
      child.stdin?.end();
      const result = collectCli(child, ["run"]);
      await new Promise((r) => setTimeout(r, 1_000));
      child.kill("SIGINT");
      const { code, stderr } = await result;
      expect(code).toBe(130);
      expect(stderr).toContain(
        "remote-task: interrupted; this bridge has no /cancel (the reference bridge), so the remote command, if it started, keeps running until it ends or its timeout (30 seconds).",
      );
      expect(stderr).not.toContain("was cancelled");
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});

describe("run-many", () => {
  const input = "echo first\n\n# a comment\nsleep 0.3; echo second\nexit 7\necho fourth\n";

  it("prints results in input order and fails when one task fails", async () => {
    const { code, stdout, stderr } = await runCli(["run-many", "--concurrency", "4"], {
      env,
      input,
    });
    expect(code).toBe(1);
    const order = ["[1] echo first", "[2] sleep 0.3; echo second", "[3] exit 7", "[4] echo fourth"];
    const positions = order.map((head) => stdout.indexOf(head));
    expect(positions.every((p) => p >= 0)).toBe(true);
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
    expect(stdout).toContain("(exit 7,");
    expect(stderr).toContain("4 tasks, 3 succeeded, 1 failed");
  });

  it("a refusal every task would meet (the network ceiling, 403) is said once, exit 2", async () => {
    const input = Array.from({ length: 10 }, (_, i) => `echo ${i}`).join("\n");
    const { code, stdout, stderr } = await runCli(["run-many", "--network", "open"], {
      env,
      input,
    });
    expect(code).toBe(2);
    expect(stderr.match(/ForbiddenError/g)).toHaveLength(1);
    expect(stderr).toMatch(/stopped early: \d+ tasks? stopped or never sent/);
    expect(stdout.split("\n").filter((line) => line.startsWith("--- ["))).toHaveLength(10);
  });

  it("a long command's header line shows its start and its length; the JSON keeps it whole", async () => {
    const command = `echo ${"x".repeat(2_000)} > /dev/null`;
    const text = await runCli(["run-many"], { env, input: `${command}\n` });
    const head = text.stdout.split("\n")[0] ?? "";
    expect(head).toMatch(/^--- \[1\] echo x+\.\.\. \(2017 characters\) \(exit 0, /);
    expect(head.length).toBeLessThan(200);
    const json = await runCli(["run-many", "--json"], { env, input: `${command}\n` });
    expect(JSON.parse(json.stdout)[0].command).toBe(command);
  });

  it("prints a JSON array in input order", async () => {
    const { code, stdout } = await runCli(["run-many", "--json"], {
      env,
      input: "sleep 0.2; echo a\necho b\n",
    });
    expect(code).toBe(0);
    const results = JSON.parse(stdout);
    expect(results.map((r: { command: string }) => r.command)).toEqual([
      "sleep 0.2; echo a",
      "echo b",
    ]);
    // Numbered from 1, as the text output's [1], [2].
    expect(results.map((r: { task: number }) => r.task)).toEqual([1, 2]);
    for (const r of results) execResultSchema.parse(r.result);
    expect(results[0].result.stdout).toBe("a\n");
  });

  it("reads commands from --file", async () => {
    const file = join(await testDir("rt-cli-"), "tasks.txt");
    await writeFile(file, "echo from-file\n");
    const { code, stdout } = await runCli(["run-many", "--file", file], { env });
    expect(code).toBe(0);
    expect(stdout).toContain("from-file");
  });

  it("refuses empty input", async () => {
    const { code, stderr } = await runCli(["run-many"], { env, input: "\n# nothing\n" });
    expect(code).toBe(2);
    expect(stderr).toContain("no commands given");
  });
});

/** What `serve` printed up to its `export ...` line, and that line. */
async function exportLineOf(server: ChildProcess): Promise<{ out: string; exportLine: string }> {
  let out = "";
  server.stdout?.setEncoding("utf8");
  const exportLine = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no export line: ${out}`)), 20_000);
    server.stdout?.on("data", (chunk: string) => {
      out += chunk;
      const line = out.split("\n").find((l) => l.startsWith("export "));
      if (line) {
        clearTimeout(timer);
        resolve(line);
      }
    });
  });
  return { out, exportLine };
}

describe("serve and health", () => {
  it("serves a working bridge and stops on SIGINT", async () => {
    const server = startCli(["serve", "--local", "--isolation", "none"]);
    const { out, exportLine } = await exportLineOf(server);
    const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(exportLine)?.[1];
    const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(exportLine)?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(token).toBeTruthy();
    expect(out).toContain(`token: ${token}`);

    const serveEnv = cleanEnv({ CLOUDFLARE_SANDBOX_URL: url!, CLOUDFLARE_SANDBOX_TOKEN: token! });
    const health = await runCli(["health"], { env: serveEnv });
    expect(health.code).toBe(0);
    expect(health.stdout).toMatch(/backend\s+local/);
    expect(health.stdout).toMatch(/isolation\s+none/);
    const run = await runCli(["run", "--", "echo via-serve"], { env: serveEnv });
    expect(run.stdout).toBe("via-serve\n");

    server.kill("SIGINT");
    const [code] = await once(server, "exit");
    expect(code).toBe(0);
  });

  it("the one-shell example of serve --help works as written (port changed)", async () => {
    const port = await closedPort();
    const { stdout: help } = await runCli(["serve", "--help"]);
    const example = help.slice(help.indexOf("Example, in one shell"));
    const lines = example
      .split("\n")
      .filter((line) => line.trimStart().startsWith("$ "))
      .map((line) => line.trimStart().slice(2).replaceAll("8787", String(port)));
    expect(lines.length).toBeGreaterThanOrEqual(3);
    const bin = await testDir("rt-cli-path-");
    await writeFile(
      join(bin, "remote-task"),
      `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n`,
      {
        mode: 0o755,
      },
    );
    // The test waits for the server where a person typing would not need to.
    const wait = "until remote-task health > /dev/null 2>&1; do sleep 0.1; done";
    const firstRun = lines.findIndex((line) => line.startsWith("remote-task run"));
    lines.splice(firstRun, 0, wait);
    const script = ["trap 'kill %1 2>/dev/null' EXIT", ...lines].join("\n");
    const child = spawn("bash", ["-c", script], {
      env: { ...cleanEnv(), PATH: `${bin}:${process.env.PATH}` },
    });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
    });
    const [code] = await once(child, "exit");
    expect(out).toMatch(/^Linux /);
    expect(code).toBe(0);
  });

  it("serve --local takes per-sandbox limits, prints them, and /health reports them", async () => {
    const server = startCli([
      "serve",
      "--local",
      "--isolation",
      "none",
      "--processes",
      "48",
      "--memory-mib",
      "300",
      "--workspace-mib",
      "20",
    ]);
    const { out, exportLine } = await exportLineOf(server);
    try {
      expect(out).toMatch(
        /^sandbox: .*memory MiB 300 \(.+\).*\/workspace MiB 20 \(rlimit-fsize\)/m,
      );
      const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(exportLine)?.[1] as string;
      const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(exportLine)?.[1] as string;
      const health = await runCli(["health", "--json"], {
        env: cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token }),
      });
      const { sandbox } = JSON.parse(health.stdout) as {
        sandbox: Record<string, { max: number } | string>;
      };
      expect(sandbox.memoryBytes).toMatchObject({ max: 300 * 1024 * 1024 });
      expect(sandbox.workspaceBytes).toMatchObject({ max: 20 * 1024 * 1024 });
      if (process.getuid?.() === 0) expect(sandbox.processes).toMatchObject({ max: 48 });
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });
});

describe("serve and health: network, limits and health output", () => {
  it("serve --local takes the deployer's network default, ceiling and private hosts, shows them and /health reports them", async () => {
    const server = startCli([
      "serve",
      "--local",
      "--isolation",
      "bwrap",
      "--network-ceiling",
      "pypi.org,*.pythonhosted.org:443",
      "--allow-private",
      "10.0.0.7:3141",
    ]);
    const { out, exportLine } = await exportLineOf(server);
    try {
      expect(out).toMatch(/^network: default none, ceiling pypi.org,\*.pythonhosted.org:443$/m);
      const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(exportLine)?.[1] as string;
      const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(exportLine)?.[1] as string;
      const health = await runCli(["health", "--json"], {
        env: cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token }),
      });
      expect(JSON.parse(health.stdout).network).toEqual({
        default: "none",
        ceiling: { allow: ["pypi.org", "*.pythonhosted.org:443"] },
      });
      const refused = await runCli(["run", "--network", "open", "--", "true"], {
        env: cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token }),
      });
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain("more than this bridge allows");
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });

  it("serve --local --secret shows the secrets' names and hosts, /health lists them, never a value", async () => {
    const value = "ghp_cli_test_value_0123456789";
    const server = startCli(
      [
        "serve",
        "--local",
        "--isolation",
        "bwrap",
        "--secret",
        "GH_TOKEN=env:RT_CLI_GH@api.github.com|Authorization: Bearer {value}",
      ],
      cleanEnv({ RT_CLI_GH: value }),
    );
    const { out, exportLine } = await exportLineOf(server);
    try {
      expect(out).toMatch(/^secrets: GH_TOKEN \(to api\.github\.com\)$/m);
      expect(out).not.toContain(value);
      const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(exportLine)?.[1] as string;
      const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(exportLine)?.[1] as string;
      const health = await runCli(["health", "--json"], {
        env: cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token }),
      });
      expect(JSON.parse(health.stdout).secrets).toEqual([
        { name: "GH_TOKEN", hosts: ["api.github.com"] },
      ]);
      expect(health.stdout).not.toContain(value);
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });

  it("serve --local --secret without bubblewrap, or malformed, is a usage error", async () => {
    const none = await runCli([
      "serve",
      "--local",
      "--isolation",
      "none",
      "--secret",
      "GH_TOKEN=env:GH_TOKEN@api.github.com",
    ]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("cannot inject secrets");
    expect(none.stderr).toContain("leave out --secret");
    const bad = await runCli(["serve", "--local", "--secret", "GH_TOKEN=ghp_abc@api.github.com"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("expected NAME=env:VAR@HOSTS");
  });

  it("serve --local refuses a network setting isolation none cannot enforce, or a bad host, as usage errors", async () => {
    const none = await runCli([
      "serve",
      "--local",
      "--isolation",
      "none",
      "--network-ceiling",
      "open",
    ]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("does not control network access");
    const bad = await runCli(["serve", "--local", "--allow-private", "http://10.0.0.7"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('"http://10.0.0.7" is neither a mode nor a host');
  });

  it("run --local --network lets the embedded bridge give the command that network, through its proxy", async () => {
    const { code, stdout, stderr } = await runCli(
      ["run", "--local", "--isolation", "bwrap", "--network", "open", "--", 'echo "$HTTPS_PROXY"'],
      { timeoutMs: 60_000 },
    );
    expect(stderr).toBe("");
    expect(code).toBe(0);
    expect(stdout).toMatch(/^http:\/\/127\.0\.0\.1:\d+\n$/);
  });

  it("serve --local refuses a limit below what a shell needs, as a usage error", async () => {
    const { code, stderr } = await runCli(["serve", "--local", "--memory-mib", "1"]);
    expect(code).toBe(2);
    expect(stderr).toContain("memoryBytes must be an integer of at least");
  });

  it("health prints protocol, backend and limits", async () => {
    const { code, stdout } = await runCli(["health", "--json"], { env });
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({
      ok: true,
      protocol: PROTOCOL_VERSION,
      backend: "local",
    });
  });

  it("health says what network policies the bridge enforces", async () => {
    const { code, stdout } = await runCli(["health"], { env });
    expect(code).toBe(0);
    const health = await (
      await fetch(`${bridge.url}/health`, { headers: { authorization: `Bearer ${bridge.token}` } })
    ).json();
    if (health.network === undefined) {
      expect(stdout).toMatch(/^network {12}not controlled by this bridge/m);
    } else {
      expect(stdout).toContain(`network default    ${JSON.stringify(health.network.default)}\n`);
      expect(stdout).toContain(`network ceiling    ${JSON.stringify(health.network.ceiling)}\n`);
    }
  });

  it("health fails clearly when the bridge is unreachable", async () => {
    const port = await closedPort();
    const { code, stderr } = await runCli(["health", "--url", `http://127.0.0.1:${port}`]);
    expect(code).toBe(125);
    expect(stderr).toContain("ConnectionError");
  });

  it("health fails clearly when unauthorized", async () => {
    const { code, stderr } = await runCli(["health", "--url", bridge.url, "--token", "nope"]);
    expect(code).toBe(125);
    expect(stderr).toContain("AuthenticationError");
  });
});

describe("mcp", () => {
  it("serves remote_task to a real MCP client", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, "mcp"],
      env: env as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "cli-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(["remote_task"]);
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: "echo via-mcp" },
      });
      expect(result.isError).toBeFalsy();
      expect(result.content).toEqual([{ type: "text", text: "via-mcp\n" }]);
    } finally {
      await client.close();
    }
  });

  it("--local serves remote_task on its own embedded bridge", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, "mcp", "--local"],
      env: cleanEnv() as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "cli-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: "echo via-local" },
      });
      expect(result.content).toEqual([{ type: "text", text: "via-local\n" }]);
    } finally {
      await client.close();
    }
  });

  it("fails clearly when no bridge is configured", async () => {
    const { code, stderr } = await runCli(["mcp"]);
    expect(code).toBe(125);
    expect(stderr).toContain("CLOUDFLARE_SANDBOX_URL");
  });
});
