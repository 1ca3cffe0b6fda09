import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { describe, expect, it } from "vitest";
import { requireEngine, skipDocker } from "../../bridge/test/docker-engine.js";
import { BIN, cleanEnv, runCli, startCli } from "./helpers.js";

describe.skipIf(skipDocker)("--docker IMAGE (the embedded bridge on the docker backend)", () => {
  const dockerFlags = () => {
    const { host, image, ulimits } = requireEngine();
    return [
      "--docker",
      image,
      "--docker-engine",
      host,
      ...Object.entries(ulimits).flatMap(([name, value]) => [
        "--docker-ulimit",
        `${name}=${value}`,
      ]),
    ];
  };

  it("runs a command in a fresh container of the image", async () => {
    const result = await runCli(["run", ...dockerFlags(), "--", "id -u; hostname; pwd"]);
    // A uid of its own per container (60001..64999), no host account.
    expect(result).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^6\d{4}\nsandbox\n\/workspace\n$/),
    });
  });

  it("takes --network: the call reaches out only through the egress proxy, which refuses loopback", async () => {
    const result = await runCli([
      "run",
      ...dockerFlags(),
      "--network",
      "open",
      "--",
      'echo "$https_proxy"; wget -q -O- http://127.0.0.1:9/ 2>&1; (exec 3<>/dev/tcp/10.0.0.1/80) 2>/dev/null || echo no-route',
    ]);
    expect(result.stdout).toBe(
      "http://127.0.0.1:3128\nwget: server returned error: HTTP/1.1 403 Forbidden\nno-route\n",
    );
  });

  it("serve --docker passes --allow-private on: a call with network reaches that host", async () => {
    const host = createServer((_req, res) => res.end("hello from the host"));
    await new Promise<void>((resolve) => host.listen(0, "127.0.0.1", resolve));
    const allowed = `127.0.0.1:${(host.address() as AddressInfo).port}`;
    const server = startCli([
      "serve",
      ...dockerFlags(),
      "--network-ceiling",
      "open",
      "--allow-private",
      allowed,
    ]);
    try {
      let out = "";
      server.stdout?.setEncoding("utf8");
      for await (const chunk of server.stdout ?? []) {
        out += chunk;
        if (/^export .*\n/m.test(out)) break;
      }
      const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(out)?.[1] ?? "";
      const token = /CLOUDFLARE_SANDBOX_TOKEN=(\S+)/.exec(out)?.[1] ?? "";
      const env = cleanEnv({ CLOUDFLARE_SANDBOX_URL: url, CLOUDFLARE_SANDBOX_TOKEN: token });
      const run = await runCli(
        ["run", "--network", "open", "--", `wget -q -O- http://${allowed}/`],
        { env },
      );
      expect(run.stdout).toBe("hello from the host");
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
      host.close();
    }
  });

  it("health --docker reports the image and the engine's runtime", async () => {
    const result = await runCli(["health", ...dockerFlags()]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      new RegExp(`^image +${requireEngine().image} \\(runtime runc\\)$`, "m"),
    );
  });

  it("run --docker takes the limits of serve (--memory-mib)", async () => {
    const result = await runCli([
      "run",
      ...dockerFlags(),
      "--memory-mib",
      "256",
      "--",
      "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]);
    expect(result).toMatchObject({ code: 0, stdout: `${256 * 1024 * 1024}\n` });
  });

  it("--docker-ulimit with a name no engine knows is a usage error, before any container", async () => {
    const result = await runCli([
      "run",
      ...dockerFlags(),
      "--docker-ulimit",
      "bogus=5",
      "--",
      "true",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("ulimit bogus is not an rlimit the engine knows");
  });

  it("health --docker and serve --docker refuse when no container can start, with the engine's reason", async () => {
    const flags = [...dockerFlags(), "--docker-user", "no-such-user"];
    const health = await runCli(["health", ...flags]);
    expect(health.code).toBe(125);
    expect(health.stdout).toBe("");
    expect(health.stderr).toMatch(/No container can be started on this engine.*no-such-user/);
    const serve = await runCli(["serve", ...flags]);
    expect(serve.code).toBe(125);
    expect(serve.stdout).toBe("");
    expect(serve.stderr).toMatch(/No container can be started on this engine.*no-such-user/);
  });

  it.skipIf(skipDocker || requireEngine().ulimits.nproc === undefined)(
    "on an engine that may not raise nproc, health --docker names the --docker-ulimit to pass",
    async () => {
      const { host, image, ulimits } = requireEngine();
      const result = await runCli(["health", "--docker", image, "--docker-engine", host]);
      expect(result.code).toBe(125);
      expect(result.stderr).toContain(`pass --docker-ulimit nproc=${ulimits.nproc}`);
    },
  );

  it("mcp --docker takes --docker-ulimit and --docker-user: a call runs as that user", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, "mcp", ...dockerFlags(), "--docker-user", "65534:65534"],
      env: cleanEnv() as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "cli-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const result = await client.callTool({
        name: "remote_task",
        arguments: { command: "id -u" },
      });
      expect(result.content).toEqual([{ type: "text", text: "65534\n" }]);
    } finally {
      await client.close();
    }
  });

  it("says clearly when the image is not there", async () => {
    const flags = dockerFlags();
    flags[1] = "localhost/remote-task-no-such-image:1";
    const result = await runCli(["run", ...flags, "--", "true"]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("has no image localhost/remote-task-no-such-image:1");
  });
});
