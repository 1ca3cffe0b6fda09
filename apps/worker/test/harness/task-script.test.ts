/**
 * The task script (src/task-script.ts) run by this machine's `/bin/sh` (dash), as exec runs it in a
 * container: the argv carries the command, cwd and env names; the env values come from the
 * process's environment, as exec's `env` puts them there.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { missingCwdMarker, readTaskArgv, taskArgv } from "../../src/task-script.ts";

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(
  command: string,
  options: { cwd?: string; env?: Record<string, string>; stdin?: string } = {},
): Promise<Ran> {
  const env = options.env ?? {};
  const argv = taskArgv({
    command,
    cwd: options.cwd ?? "/tmp",
    envNames: Object.keys(env),
    nonce: "n1",
    stdin: options.stdin !== undefined,
  });
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), {
      cwd: "/",
      // What a container's exec sees: the image's and the platform's variables, then the call's.
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", CLOUDFLARE_DEPLOYMENT_ID: "x", ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk;
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.on("error", () => {});
    child.stdin.end(options.stdin ?? "");
  });
}

describe("the task script", () => {
  it("runs the command with bash where there is one, in its cwd, with its exit code", async () => {
    const ran = await run('echo "$BASH_VERSION" | cut -c1; pwd; exit 3', { cwd: "/usr" });
    expect(ran).toEqual({ code: 3, stdout: "5\n/usr\n", stderr: "" });
  });

  it("gives the command PATH, the defaults and the call's env, nothing else", async () => {
    const ran = await run("env | cut -d= -f1 | sort | tr '\\n' ' '; echo \"$A|$HOME\"", {
      env: { A: 'it\'s "quoted" $HOME', HOME: "/mine" },
    });
    expect(ran.stdout).toBe(`A HOME LANG PATH PWD SHLVL TMPDIR _ it's "quoted" $HOME|/mine\n`);
  });

  it("prints the marker alone and runs nothing when the cwd is missing", async () => {
    const ran = await run("echo ran", { cwd: "/no/such/dir" });
    expect(ran).toEqual({ code: 1, stdout: "", stderr: missingCwdMarker("n1") });
  });

  it("gives the command its stdin, and reads what it left so the writer is not cut off", async () => {
    expect((await run("cat", { stdin: "a\nb\n" })).stdout).toBe("a\nb\n");
    const big = "x".repeat(1 << 20);
    expect(await run("head -c 3", { stdin: big })).toMatchObject({ code: 0, stdout: "xxx" });
    expect(await run("echo ignored", { stdin: big })).toMatchObject({
      code: 0,
      stdout: "ignored\n",
    });
    expect((await run("cat")).stdout).toBe("");
  });

  it("ends when the command's shell exits, killing what it left running", async () => {
    // Left running, the child would print "late" (its stdout is the call's) before the end.
    const ran = await run("(sleep 2; echo late) & echo done");
    expect(ran).toEqual({ code: 0, stdout: "done\n", stderr: "" });
  });

  it("carries the command and cwd intact, quotes included, and reads them back", () => {
    const command = `echo 'single' "double" $HOME \\ \n next`;
    const argv = taskArgv({ command, cwd: "/it's", envNames: ["A"], nonce: "n", stdin: true });
    expect(readTaskArgv(argv)).toEqual({ command, cwd: "/it's", stdin: true, envNames: ["A"] });
    expect(readTaskArgv(["/bin/sh", "-c", "exit 0"])).toBeUndefined();
  });
});
