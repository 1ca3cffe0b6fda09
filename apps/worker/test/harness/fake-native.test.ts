/**
 * workerd's native container path (`ctx.container.start`, `exec`, `kill`, `destroy`) on the fake
 * engine, through the probe Durable Object (probe-worker.ts): the same calls as on Podman
 * (podman-shim.test.ts), plus the faults only the fake engine makes on demand.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FakeDockerEngine } from "./engine.ts";
import { commandOf } from "./exec.ts";
import { standInImage } from "./images.ts";
import { TEST_IMAGE_ENTRYPOINT } from "./podman-shim.ts";
import { Probe } from "./probe-worker.ts";
import { pidNamespaceOf, processesIn } from "./proc.ts";

let engine: FakeDockerEngine;
let probe: Probe;

beforeAll(async () => {
  engine = await FakeDockerEngine.start({ image: standInImage() });
  probe = await Probe.start(engine.socketPath, "remote-task-harness");
});

afterEach(() => {
  engine.faults = {};
  expect(engine.problems).toEqual([]);
});

afterAll(async () => {
  await probe?.dispose();
  await engine?.close();
});

async function recordOf(name: string) {
  const id = await probe.durableObjectId(name);
  return engine.records.findLast((r) => r.durableObjectId === id);
}

describe("workerd's ctx.container on the fake engine", () => {
  it("runs the entrypoint and the commands sent, with cwd, env, stdin and exit codes", async () => {
    await probe.start("exec", TEST_IMAGE_ENTRYPOINT);
    const answer = await probe.bash(
      "exec",
      'echo "$PWD $GREETING"; tr a-z A-Z; echo err >&2; exit 4',
      {
        cwd: "/tmp",
        env: { GREETING: "hi" },
        stdin: "piped\n",
      },
    );
    expect(answer).toEqual({ stdout: "/tmp hi\nPIPED\n", stderr: "err\n", exitCode: 4 });
    const record = await recordOf("exec");
    expect(record?.execs.map(commandOf)).toEqual([
      ["/bin/bash", "-c", 'echo "$PWD $GREETING"; tr a-z A-Z; echo err >&2; exit 4'],
    ]);
    // PID 1 is the entrypoint, not the image's server.
    const ps = await probe.bash("exec", "cat /proc/1/cmdline | tr '\\0' ' '");
    expect(ps.stdout).toContain("sleep 3600");
    await probe.call("exec", "destroy");
  });

  it("kill() sends SIGTERM to the command through a detached exec", async () => {
    await probe.start("kill", TEST_IMAGE_ENTRYPOINT);
    const answer = await probe.call("kill", "kill", {
      argv: ["/bin/bash", "-c", "echo started; exec sleep 600"],
    });
    expect(answer).toEqual({ first: "started\n", exitCode: 143 });
    const record = await recordOf("kill");
    expect(record?.execs.map((e) => [commandOf(e) === undefined, e.detached === true])).toEqual([
      [false, false],
      [true, true],
    ]);
    await probe.call("kill", "destroy");
  });

  it("a container killed under a command ends it with 137", async () => {
    await probe.start("dies", TEST_IMAGE_ENTRYPOINT);
    await probe.bash("dies", "true");
    const record = await recordOf("dies");
    const answer = probe.bash("dies", "touch /workspace/started; exec sleep 600");
    await expect.poll(() => record?.execs.at(-1)?.startedAt).toBeDefined();
    await expect
      .poll(() => import("node:fs").then((fs) => fs.existsSync(`${record?.workspace}/started`)))
      .toBe(true);
    if (record !== undefined) engine.kill(record);
    expect(await answer).toMatchObject({ exitCode: 137 });
    await probe.call("dies", "destroy");
  });

  it("a command sent during a cold start runs once the container does", async () => {
    let endColdStart = () => {};
    engine.faults = { startGate: new Promise<void>((resolve) => (endColdStart = resolve)) };
    await probe.start("cold", TEST_IMAGE_ENTRYPOINT);
    const answer = probe.bash("cold", "echo warm now");
    const id = await probe.durableObjectId("cold");
    await expect
      .poll(() => engine.records.findLast((r) => r.durableObjectId === id)?.execs.length)
      .toBe(1);
    const record = await recordOf("cold");
    expect(record?.events.map((e) => e.event)).toEqual(["create", "start"]);
    endColdStart();
    expect(await answer).toEqual({ stdout: "warm now\n", stderr: "", exitCode: 0 });
    await probe.call("cold", "destroy");
  });

  it("a refused create fails the command, and leaves nothing running", async () => {
    engine.faults = { refuseCreate: true };
    await probe.start("refused", TEST_IMAGE_ENTRYPOINT);
    await expect(probe.bash("refused", "true")).rejects.toThrow(/exec: 500/);
    const record = await recordOf("refused");
    expect(record?.events.map((e) => e.event)).toEqual(["refused"]);
    expect(engine.live.filter((r) => r === record)).toEqual([]);
  });

  it("no instance: the command fails with the platform's capacity message", async () => {
    engine.faults = { noInstance: true };
    await probe.start("full", TEST_IMAGE_ENTRYPOINT);
    const failure = await probe.bash("full", "true").catch((error: unknown) => String(error));
    expect(failure).toMatch(/exec: 500/);
    expect(failure).toContain(
      "there is no container instance that can be provided to this durable object",
    );
    expect((await recordOf("full"))?.execs).toEqual([]);
  });

  it("outbound interception: plain HTTP reaches the Durable Object's binding, nothing else leaves", async () => {
    await probe.start("intercept", TEST_IMAGE_ENTRYPOINT);
    const before = await probe.bash("intercept", "curl -sS --max-time 5 http://example.com/early");
    expect(before.exitCode).not.toBe(0);
    await probe.call("intercept", "intercept");
    const http = await probe.bash(
      "intercept",
      "curl -sS --max-time 20 http://example.com/hello?x=1",
    );
    expect(http).toEqual({
      stdout: "gate: GET http://example.com/hello?x=1\n",
      stderr: "",
      exitCode: 0,
    });
    const https = await probe.bash(
      "intercept",
      "https_proxy=$http_proxy curl -sS --max-time 20 https://example.com/",
    );
    expect(https.exitCode).not.toBe(0);
    const record = await recordOf("intercept");
    expect(record?.egress.at(-1)).toMatchObject({
      dns: { allowHostnames: ["*"] },
      internet: { enabled: false },
    });
    expect(record?.files.map((f) => f.path)).toContain(
      "/etc/cloudflare/certs/cloudflare-containers-ca.crt",
    );
    expect(record?.outbound).toEqual([
      { method: "GET", url: "http://example.com/hello?x=1", status: 200 },
    ]);
    await probe.call("intercept", "destroy");
  });

  it("destroy() removes the container and every process of it", async () => {
    await probe.start("destroy", TEST_IMAGE_ENTRYPOINT);
    await probe.bash("destroy", "true");
    const record = await recordOf("destroy");
    const pid = Number(record?.events.find((e) => e.event === "running")?.detail);
    const namespace = await pidNamespaceOf(pid);
    expect(await probe.call("destroy", "destroy")).toEqual({ running: false });
    expect(record?.deleted).toBe(true);
    expect(processesIn(namespace as string)).toEqual([]);
  });
});
