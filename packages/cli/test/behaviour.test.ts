import { spawn } from "node:child_process";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger } from "@remote-task/bridge";
import type { LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
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

const MiB = 1024 * 1024;

describe("a reader that closes stdout (| head)", () => {
  it("ends run quietly: no EPIPE stack trace, exit 141, the remote command cancelled", async () => {
    const child = startCli(["run", "--stream", "--", "seq 1 10000000"], env);
    child.stdin?.end();
    let stderr = "";
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    await once(child.stdout!, "data");
    child.stdout?.destroy();
    const [code] = await once(child, "exit");
    expect(stderr).toBe("");
    expect(code).toBe(141);
    const until = Date.now() + 10_000;
    while (bridge.backend.liveSandboxes() > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(bridge.backend.liveSandboxes()).toBe(0);
  });

  it("ends run without --stream quietly too: no note after the reader went away", async () => {
    const child = startCli(["run", "--", "seq 1 300000"], env);
    child.stdin?.end();
    let stderr = "";
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    await once(child.stdout!, "data");
    child.stdout?.destroy();
    const [code] = await once(child, "exit");
    expect(stderr).toBe("");
    expect(code).toBe(141);
  });

  it.each(["--help", "run --help"])("ends %s quietly too", async (line) => {
    const args = line.split(" ");
    const child = startCli(args);
    child.stdout?.destroy();
    const { stderr } = await collectCli(child, args);
    expect(stderr).toBe("");
  });
});

describe("notes on what was shown", () => {
  const big = "head -c 3000000 /dev/zero | tr '\\0' a";

  it("without --stream: the end was kept, by whoever kept it (not 'the bridge')", async () => {
    const { code, stdout, stderr } = await runCli(["run", "--", big], { env });
    expect(code).toBe(0);
    expect(stdout.length).toBe(MiB);
    expect(stderr).toBe(
      "remote-task: stdout was 2.9MB; only its last 1.0MB is shown (raise --max-output-bytes to keep more, up to the bridge's maxOutputBytes, which remote-task health shows).\n",
    );
  });

  it("a kept end is shown from its first whole line (| head starts with a whole line)", async () => {
    const { code, stdout, stderr } = await runCli(["run", "--", "seq 1 400000"], { env });
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split("\n").map(Number);
    // Consecutive numbers to 400000: a first line cut mid-number would break the run.
    expect(lines.at(-1)).toBe(400_000);
    expect((lines[0] ?? 0) + lines.length - 1).toBe(400_000);
    expect(stderr).toMatch(/only its last .* is shown, from its first whole line \(raise/);
  });

  it("--max-output-bytes above what the bridge keeps: the note says the bridge's cap, not 'raise it'", async () => {
    const { code, stdout, stderr } = await runCli(
      ["run", "--max-output-bytes", String(4 * MiB), "--", big],
      { env },
    );
    expect(code).toBe(0);
    expect(stdout.length).toBe(MiB);
    expect(stderr).toContain(
      "this bridge keeps at most 1.0MB of an output, less than --max-output-bytes asked for",
    );
    expect(stderr).not.toContain("raise --max-output-bytes");
  });

  it("--local --max-output-bytes raises the embedded bridge's own cap: its runner is the deployer", async () => {
    const { code, stdout, stderr } = await runCli(
      ["run", "--local", "--max-output-bytes", String(4 * MiB), "--", big],
      { env: cleanEnv() },
    );
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    expect(stdout.length).toBe(3_000_000);
  });

  it("with --stream: says the start was streamed, not that the end was kept", async () => {
    const { code, stdout, stderr } = await runCli(["run", "--stream", "--", big], { env });
    expect(code).toBe(0);
    expect(stdout.length).toBe(MiB);
    expect(stderr).toContain("stdout was 2.9MB; --stream showed only its first 1.0MB");
    expect(stderr).not.toContain("kept only its end");
  });

  it("--max-output-bytes keeps more from a bridge whose deployer allows it", async () => {
    const roomy = await startEmbeddedBridge({
      logger: silentLogger,
      limits: { maxOutputBytes: 8 * MiB },
    });
    try {
      const roomyEnv = cleanEnv({
        CLOUDFLARE_SANDBOX_URL: roomy.url,
        CLOUDFLARE_SANDBOX_TOKEN: roomy.token,
      });
      const more = await runCli(["run", "--max-output-bytes", String(4 * MiB), "--", big], {
        env: roomyEnv,
      });
      expect(more.code).toBe(0);
      expect(more.stdout.length).toBe(3_000_000);
      expect(more.stderr).toBe("");
      // Without the flag, the 1 MiB default.
      const usual = await runCli(["run", "--", big], { env: roomyEnv });
      expect(usual.stdout.length).toBe(MiB);
    } finally {
      await roomy.close();
    }
  });

  it("says where bytes that are not UTF-8 cannot be kept", async () => {
    const { stdout, stderr } = await runCli(["run", "--", 'printf "\\377\\376"'], { env });
    expect(stdout).toBe("\uFFFD\uFFFD");
    expect(stderr).toContain(
      "stdout contains U+FFFD, which is how bytes that are not UTF-8 arrive",
    );
    expect(stderr).toContain("base64");
    const clean = await runCli(["run", "--", "printf 'caf\\303\\251'"], { env });
    expect(clean.stderr).toBe("");
  });
});

describe("usage errors", () => {
  it("run-many --file that cannot be read: exit 2 naming the file", async () => {
    const { code, stderr } = await runCli(["run-many", "--file", "/nonexistent/tasks.txt"], {
      env,
    });
    expect(code).toBe(2);
    expect(stderr).toBe(
      "remote-task: cannot read --file /nonexistent/tasks.txt: ENOENT: no such file or directory, open '/nonexistent/tasks.txt'\n",
    );
  });

  it.each(["internet", "opne", "pypi"])(
    "--network %s is neither a mode nor a host: exit 2 saying what is accepted",
    async (value) => {
      const { code, stderr } = await runCli(["run", "--network", value, "--", "true"], { env });
      expect(code).toBe(2);
      expect(stderr).toContain(`"${value}" is neither a mode nor a host`);
      expect(stderr).toContain("none, open, or hosts separated by commas");
    },
  );

  it("--network still takes hosts with a dot or a port", async () => {
    const { stderr } = await runCli(["run", "--network", "localhost:3141,pypi.org", "--", "true"], {
      env,
    });
    expect(stderr).not.toContain("neither a mode nor a host");
  });

  it("the refusal of network with isolation none exits 2 in run as in serve, and says what none leaves open", async () => {
    const run = await runCli(
      ["run", "--local", "--isolation", "none", "--network", "open", "--", "true"],
      { env: cleanEnv() },
    );
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("does not control network access");
    expect(run.stderr).toContain('warning: isolation "none": commands run with no namespaces');
  });

  it("an embedded bridge's refusal is said once, with no raw JSON log line", async () => {
    const { code, stderr } = await runCli(
      ["run", "--local", "--isolation", "none", "--cwd", "/tmp", "--", "pwd"],
      { env: cleanEnv() },
    );
    expect(code).toBe(2);
    expect(stderr.split("\n").filter((line) => line.startsWith("{"))).toEqual([]);
    expect(stderr).toContain("Check --cwd.");
  });
});

describe("run-many", () => {
  it("says '1 task'", async () => {
    const { stderr } = await runCli(["run-many"], { env, input: "echo one\n" });
    expect(stderr).toMatch(/remote-task: 1 task, 1 succeeded, 0 failed in /);
  });

  it("stops early against a bridge that is not there: one error, the rest never sent, exit 125", async () => {
    const port = await closedPort();
    const input = Array.from({ length: 50 }, (_, i) => `echo ${i}`).join("\n");
    const { code, stdout, stderr } = await runCli(
      ["run-many", "--url", `http://127.0.0.1:${port}`, "--token", "t"],
      { env: cleanEnv(), input, timeoutMs: 60_000 },
    );
    expect(code).toBe(125);
    expect(stderr.match(/ConnectionError/g)).toHaveLength(1);
    expect(stderr).toMatch(/stopped early: \d+ tasks? stopped or never sent/);
    expect(stdout.split("\n").filter((line) => line.startsWith("--- ["))).toHaveLength(50);
  });
});

/** What `serve` printed up to its `export ...` line. */
async function bannerOf(server: ReturnType<typeof startCli>): Promise<string> {
  let out = "";
  server.stdout?.setEncoding("utf8");
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner: ${out}`)), 30_000);
    server.stdout?.on("data", (chunk: string) => {
      out += chunk;
      if (out.includes("Press Ctrl-C")) {
        clearTimeout(timer);
        resolve(out);
      }
    });
  });
}

describe("serve: the token outside argv", () => {
  const token = "serve-token-from-the-environment-0123456789";

  async function serveAndCheck(args: string[], serveEnv: NodeJS.ProcessEnv) {
    const server = startCli(["serve", "--local", "--isolation", "none", ...args], serveEnv);
    let stderr = "";
    server.stderr?.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    try {
      const banner = await bannerOf(server);
      const url = /on (http:\/\/\S+) /.exec(banner)?.[1];
      const health = await runCli(["health", "--url", url!], {
        env: cleanEnv({ CLOUDFLARE_SANDBOX_TOKEN: token }),
      });
      return { banner, health, stderr: () => stderr };
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  }

  it("from $CLOUDFLARE_SANDBOX_TOKEN: used, not printed, no warning", async () => {
    const { banner, health, stderr } = await serveAndCheck(
      [],
      cleanEnv({ CLOUDFLARE_SANDBOX_TOKEN: token }),
    );
    expect(health.code).toBe(0);
    expect(banner).toContain("token: from $CLOUDFLARE_SANDBOX_TOKEN");
    expect(banner).not.toContain(token);
    expect(stderr()).not.toContain("--token puts the token");
  });

  it("from --token-file", async () => {
    const file = join(await testDir("rt-token-"), "token");
    await writeFile(file, `${token}\n`, { mode: 0o600 });
    const { banner, health } = await serveAndCheck(["--token-file", file], cleanEnv());
    expect(health.code).toBe(0);
    expect(banner).toContain(`token: from --token-file ${file}`);
  });

  it("--token still works, with a warning that it is visible to every process", async () => {
    const { health, stderr } = await serveAndCheck(["--token", token], cleanEnv());
    expect(health.code).toBe(0);
    expect(stderr()).toContain("warning: --token puts the token in this process's command line");
  });

  it("a short token's warning is a line of text, not a JSON log line", async () => {
    const { stderr } = await serveAndCheck([], cleanEnv({ CLOUDFLARE_SANDBOX_TOKEN: "short" }));
    expect(stderr()).toContain("remote-task: warning: The bridge token is 5 characters long");
    expect(
      stderr()
        .split("\n")
        .filter((line) => line.startsWith("{")),
    ).toEqual([]);
  });

  it("an explicit --isolation none says what it does not protect", async () => {
    const { stderr } = await serveAndCheck([], cleanEnv({ CLOUDFLARE_SANDBOX_TOKEN: token }));
    expect(stderr()).toContain('warning: isolation "none": commands run with no namespaces');
  });
});

describe("serve: Ctrl-C with calls running", () => {
  it("ends every call in flight cancelled (130), none with a connection error", async () => {
    const server = startCli(["serve", "--local"], cleanEnv());
    const banner = await bannerOf(server);
    const exportLine = banner.split("\n").find((line) => line.startsWith("export "))!;
    const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(exportLine)![1]!;
    const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(exportLine)![1]!;
    const clientEnv = cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token });
    const clients = [1, 2, 3].map(() => {
      const child = startCli(["run", "--stream", "--", "echo started; sleep 60"], clientEnv);
      child.stdin?.end();
      return child;
    });
    // Every command is running.
    await Promise.all(
      clients.map(
        (child) =>
          new Promise<void>((resolve) => {
            let out = "";
            child.stdout?.setEncoding("utf8").on("data", (d: string) => {
              out += d;
              if (out.includes("started")) resolve();
            });
          }),
      ),
    );
    const results = clients.map((child) => collectCli(child, ["run"], 30_000));
    server.kill("SIGINT");
    const [serveCode] = await once(server, "exit");
    expect(serveCode).toBe(0);
    for (const result of await Promise.all(results)) {
      expect(result.stderr).toContain("Command was cancelled.");
      expect(result.code).toBe(130);
    }
  });
});

describe("run-many on a terminal", () => {
  it("says it reads the commands from stdin and how to end them", async () => {
    // `script` gives the command line a terminal; Ctrl-D (EOT) ends the input.
    const child = spawn(
      "script",
      ["-qec", `"${process.execPath}" "${BIN}" run-many --url http://127.0.0.1:9`, "/dev/null"],
      { env: cleanEnv(), stdio: ["pipe", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout?.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      if (out.includes("Ctrl-D")) child.stdin?.end("\x04");
    });
    const [code] = await once(child, "exit");
    expect(out).toContain(
      "remote-task: reading commands from stdin, one per line; end with Ctrl-D",
    );
    expect(out).toContain("no commands given");
    expect(code).toBe(2);
  });
});
