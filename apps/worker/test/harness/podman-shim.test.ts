/**
 * workerd's native container path (`ctx.container.start`, `exec`, `kill`, `destroy`) under
 * Miniflare against real Podman containers through the shim (podman-shim.ts), driven by a
 * test-only Durable Object (probe-worker.ts). Each test uses a Durable Object of its own, and
 * looks only at the containers this file's shim created (by its label).
 */
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ensurePodman,
  type PodmanShim,
  SHIM_LABEL,
  startPodmanShim,
  TEST_IMAGE_ENTRYPOINT,
} from "./podman-shim.ts";
import { PROBE_CLASS, PROBE_WORKER } from "./probe-worker.ts";

let shim: PodmanShim;
let mf: Miniflare;
let url: URL;
const podman = ensurePodman();

beforeAll(async () => {
  shim = await startPodmanShim();
  mf = new Miniflare(
    convertV4MiniflareOptions({
      host: "127.0.0.1",
      port: 0,
      containerEngine: { localDocker: { socketPath: `unix:${shim.socketPath}` } },
      workers: [
        {
          name: "probe",
          modules: true,
          script: PROBE_WORKER,
          compatibilityDate: "2026-11-01",
          durableObjects: {
            PROBE: {
              className: PROBE_CLASS,
              useSQLite: true,
              container: { imageName: podman.image },
            },
          },
        },
      ],
    }),
  );
  url = await mf.ready;
});

afterAll(async () => {
  await mf?.dispose();
  await shim?.close();
});

/** A request to Podman itself (not through the shim). */
function engine(method: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: podman.socketPath, method, path, headers: { host: "localhost" } },
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
    req.end();
  });
}

async function probe<T = Record<string, unknown>>(
  name: string,
  op: string,
  body: unknown = {},
): Promise<T> {
  const response = await fetch(new URL(`/${name}/${op}`, url), {
    method: "POST",
    body: JSON.stringify(body),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`${op}: ${response.status} ${text}`);
  return JSON.parse(text) as T;
}

interface ExecAnswer {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** A started container of Durable Object `name`, internet off unless asked. */
async function started(name: string, enableInternet = false): Promise<void> {
  await probe(name, "start", { enableInternet, entrypoint: TEST_IMAGE_ENTRYPOINT });
}

/** The container the shim created for Durable Object `name` (the last one). */
async function containerOf(name: string) {
  const namespace = await mf.getDurableObjectNamespace("PROBE");
  const id = namespace.idFromName(name).toString();
  return shim.containers.findLast((c) => c.durableObjectId === id);
}

function bash(name: string, cmd: string, options: Record<string, unknown> = {}) {
  return probe<ExecAnswer>(name, "exec", { argv: ["/bin/bash", "-c", cmd], ...options });
}

describe("workerd's ctx.container on Podman through the shim", () => {
  it("runs a command with its cwd and env: stdout, stderr and the exit code apart", async () => {
    await started("exec");
    const answer = await bash("exec", 'echo "out $PWD $GREETING"; echo err >&2; exit 3', {
      cwd: "/tmp",
      env: { GREETING: "hello there" },
    });
    expect(answer).toEqual({ stdout: "out /tmp hello there\n", stderr: "err\n", exitCode: 3 });
    expect((await containerOf("exec"))?.network).toBe("none");
    await probe("exec", "destroy");
  });

  it("pipes stdin to the command", async () => {
    await started("stdin");
    const answer = await bash("stdin", "tr a-z A-Z; echo done", { stdin: "piped in\nline 2\n" });
    expect(answer).toEqual({ stdout: "PIPED IN\nLINE 2\ndone\n", stderr: "", exitCode: 0 });
    await probe("stdin", "destroy");
  });

  it("gives a container with internet off only the loopback interface", async () => {
    await started("offline");
    const answer = await bash("offline", "ls /sys/class/net");
    expect(answer).toEqual({ stdout: "lo\n", stderr: "", exitCode: 0 });
    const record = await containerOf("offline");
    expect(record?.network).toBe("none");
    expect(record?.egress.at(-1)?.internet?.enabled).toBe(false);
    await probe("offline", "destroy");
  });

  it("gives a container with internet on a network of its own", async () => {
    await started("online", true);
    const answer = await bash("online", "ls /sys/class/net");
    expect(answer.stdout.split("\n")).toContain("eth0");
    const record = await containerOf("online");
    expect(record?.network).toBe("bridge");
    expect(record?.egress.at(-1)?.internet?.enabled).toBe(true);
    await probe("online", "destroy");
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
    await probe("limits", "destroy");
  });

  it("kill() ends a long command, which exits by SIGTERM", async () => {
    await started("kill");
    const answer = await probe<{ first: string; exitCode: number }>("kill", "kill", {
      argv: ["/bin/bash", "-c", "echo started; exec sleep 600"],
    });
    expect(answer).toEqual({ first: "started\n", exitCode: 128 + 15 });
    const after = await bash("kill", "pgrep -f 'sleep 600' || echo none");
    expect(after.stdout).toBe("none\n");
    await probe("kill", "destroy");
  });

  it("destroy() removes the container from Podman", async () => {
    await started("destroy");
    expect((await bash("destroy", "true")).exitCode).toBe(0);
    const record = await containerOf("destroy");
    expect(record).toBeDefined();
    const before = await engine("GET", `/containers/${record?.id}/json`);
    expect(before.status).toBe(200);
    expect(JSON.parse(before.body).Config.Labels[SHIM_LABEL]).toBe(shim.id);
    expect(await probe("destroy", "destroy")).toEqual({ running: false });
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
    await probe("pid1", "destroy");
  });

  it("saw no request it could not serve", () => {
    expect(shim.problems).toEqual([]);
  });
});
