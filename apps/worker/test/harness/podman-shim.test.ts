/**
 * workerd's native container path (`ctx.container.start`, `exec`, `kill`, `destroy`) under
 * Miniflare against real Podman containers through the shim (podman-shim.ts), driven by a
 * test-only Durable Object (probe-worker.ts). Each test uses a Durable Object of its own, and
 * looks only at the containers this file's shim created (by its label).
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ensurePodman,
  PID_LABEL,
  type PodmanEngine,
  type PodmanShim,
  podmanForTests,
  SHIM_LABEL,
  startPodmanShim,
  TEST_IMAGE_ENTRYPOINT,
} from "./podman-shim.ts";
import { Probe } from "./probe-worker.ts";

let shim: PodmanShim;
let probe: Probe;
const found = podmanForTests();
// Read only by tests that run, which only happens with an engine (or fails at `beforeAll`).
const podman = found.engine as PodmanEngine;

beforeAll(async () => {
  if (found.skip) return;
  if (found.engine === undefined) throw new Error(found.reason);
  shim = await startPodmanShim({ engine: podman });
  probe = await Probe.start(shim.socketPath, podman.image);
});

afterAll(async () => {
  await probe?.dispose();
  await shim?.close();
});

/** A request to Podman itself (not through the shim). */
function engine(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        socketPath: podman.socketPath,
        method,
        path,
        headers: {
          host: "localhost",
          ...(text === undefined ? {} : { "content-type": "application/json" }),
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

/** A started container of Durable Object `name`, internet off unless asked. */
async function started(name: string, enableInternet = false): Promise<void> {
  await probe.start(name, TEST_IMAGE_ENTRYPOINT, enableInternet);
}

/** The container the shim created for Durable Object `name` (the last one). */
async function containerOf(name: string) {
  const id = await probe.durableObjectId(name);
  return shim.containers.findLast((c) => c.durableObjectId === id);
}

const bash = (name: string, cmd: string, options?: Record<string, unknown>) =>
  probe.bash(name, cmd, options);

describe.skipIf(found.skip)("workerd's ctx.container on Podman through the shim", () => {
  it("runs a command with its cwd and env: stdout, stderr and the exit code apart", async () => {
    await started("exec");
    const answer = await bash("exec", 'echo "out $PWD $GREETING"; echo err >&2; exit 3', {
      cwd: "/tmp",
      env: { GREETING: "hello there" },
    });
    expect(answer).toEqual({ stdout: "out /tmp hello there\n", stderr: "err\n", exitCode: 3 });
    expect((await containerOf("exec"))?.network).toBe("none");
    await probe.call("exec", "destroy");
  });

  it("pipes stdin to the command", async () => {
    await started("stdin");
    const answer = await bash("stdin", "tr a-z A-Z; echo done", { stdin: "piped in\nline 2\n" });
    expect(answer).toEqual({ stdout: "PIPED IN\nLINE 2\ndone\n", stderr: "", exitCode: 0 });
    await probe.call("stdin", "destroy");
  });

  it("gives a container with internet off only the loopback interface", async () => {
    await started("offline");
    const answer = await bash("offline", "ls /sys/class/net");
    expect(answer).toEqual({ stdout: "lo\n", stderr: "", exitCode: 0 });
    const record = await containerOf("offline");
    expect(record?.network).toBe("none");
    expect(record?.egress.at(-1)?.internet?.enabled).toBe(false);
    await probe.call("offline", "destroy");
  });

  it("gives a container with internet on a network of its own", async () => {
    await started("online", true);
    const answer = await bash("online", "ls /sys/class/net");
    expect(answer.stdout.split("\n")).toContain("eth0");
    const record = await containerOf("online");
    expect(record?.network).toBe("bridge");
    expect(record?.egress.at(-1)?.internet?.enabled).toBe(true);
    await probe.call("online", "destroy");
  });

  it("takes workerd's outbound interception set-up: the CA file lands in the container", async () => {
    await started("intercept");
    await probe.call("intercept", "intercept");
    const answer = await bash(
      "intercept",
      "cat /etc/cloudflare/certs/cloudflare-containers-ca.crt",
    );
    expect(answer.stdout).toContain("BEGIN CERTIFICATE");
    expect((await containerOf("intercept"))?.egress.at(-1)?.dns?.allowHostnames).toEqual(["*"]);
    await probe.call("intercept", "destroy");
  });

  it("keeps the containers' nproc and nofile rlimits within the engine's", async () => {
    await started("limits");
    const answer = await bash("limits", "ulimit -Hu; ulimit -Hn");
    const [nproc, nofile] = answer.stdout.trim().split("\n").map(Number);
    const service = readFileSync(join(podman.dir, "service.pid"), "utf8").trim();
    const limits = readFileSync(`/proc/${service}/limits`, "utf8");
    const hard = (label: string) =>
      Number(
        limits
          .split("\n")
          .find((l) => l.startsWith(label))
          ?.split(/\s{2,}/)[2],
      );
    expect({ nproc, nofile }).toEqual({
      nproc: hard("Max processes"),
      nofile: hard("Max open files"),
    });
    await probe.call("limits", "destroy");
  });

  it("kill() ends a long command, which exits by SIGTERM", async () => {
    await started("kill");
    const answer = await probe.call<{ first: string; exitCode: number }>("kill", "kill", {
      argv: ["/bin/bash", "-c", "echo started; exec sleep 600"],
    });
    expect(answer).toEqual({ first: "started\n", exitCode: 128 + 15 });
    const after = await bash("kill", "pgrep -f 'sleep 600' || echo none");
    expect(after.stdout).toBe("none\n");
    await probe.call("kill", "destroy");
  });

  it("destroy() removes the container from Podman", async () => {
    await started("destroy");
    expect((await bash("destroy", "true")).exitCode).toBe(0);
    const record = await containerOf("destroy");
    expect(record).toBeDefined();
    const before = await engine("GET", `/containers/${record?.id}/json`);
    expect(before.status).toBe(200);
    const inspected = JSON.parse(before.body);
    expect(inspected.Config.Labels[SHIM_LABEL]).toBe(shim.id);
    // A PID 1 that dies is not brought back (workerd asks for on-failure restarts).
    expect(inspected.HostConfig.RestartPolicy.Name).toMatch(/^(no)?$/);
    expect(await probe.call("destroy", "destroy")).toEqual({ running: false });
    expect(record?.deleted).toBe(true);
    expect((await engine("GET", `/containers/${record?.id}/json`)).status).toBe(404);
  });

  it("the test image's PID 1 stops on SIGTERM, not by the stop timeout's SIGKILL", async () => {
    await started("pid1");
    expect((await bash("pid1", "true")).exitCode).toBe(0);
    const record = await containerOf("pid1");
    // A stop with a long timeout: a PID 1 that ignored SIGTERM would end killed (137).
    expect((await engine("POST", `/containers/${record?.id}/stop?t=20`)).status).toBe(204);
    const state = JSON.parse((await engine("GET", `/containers/${record?.id}/json`)).body).State;
    expect(state).toMatchObject({ Running: false, ExitCode: 0 });
    await probe.call("pid1", "destroy");
  });

  it("keeps two runs' containers of the same Durable Object apart", async () => {
    // Another run: a shim of its own, finding the engine itself.
    const other = await startPodmanShim({ engine: ensurePodman() });
    const otherProbe = await Probe.start(other.socketPath, podman.image);
    try {
      await started("twin");
      await otherProbe.start("twin", TEST_IMAGE_ENTRYPOINT);
      const mine = await bash("twin", "hostname");
      const theirs = await otherProbe.bash("twin", "hostname");
      expect(mine.exitCode).toBe(0);
      expect(theirs.exitCode).toBe(0);
      expect(mine.stdout).not.toBe(theirs.stdout);
      const [a, b] = [await containerOf("twin"), other.containers[0]];
      expect(a?.name).toBe(b?.name);
      expect(a?.podmanName).not.toBe(b?.podmanName);
      await otherProbe.call("twin", "destroy");
      await probe.call("twin", "destroy");
    } finally {
      await otherProbe.dispose();
      await other.close();
    }
  });

  it("removes at its start the containers a shim that died left, and only those", async () => {
    const dead = spawnSync("true").pid;
    const create = (name: string, pid: number) =>
      engine("POST", `/containers/create?name=${name}`, {
        Image: podman.image,
        Cmd: ["true"],
        Labels: { [SHIM_LABEL]: "test", [PID_LABEL]: String(pid) },
      });
    const left = await create(`rt-shim-test-left-${shim.id}`, dead);
    const live = await create(`rt-shim-test-live-${shim.id}`, process.pid);
    expect([left.status, live.status]).toEqual([201, 201]);
    const another = await startPodmanShim({ engine: podman });
    await another.close();
    expect((await engine("GET", `/containers/${JSON.parse(left.body).Id}/json`)).status).toBe(404);
    const liveId = JSON.parse(live.body).Id;
    expect((await engine("GET", `/containers/${liveId}/json`)).status).toBe(200);
    await engine("DELETE", `/containers/${liveId}?force=true`);
  });

  it("saw no request it could not serve", () => {
    expect(shim.problems).toEqual([]);
  });
});
