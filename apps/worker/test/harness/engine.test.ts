/**
 * The fake Docker engine on its own: what it records, that it fails loudly on what it does
 * not know (the suite in worker.test.ts drives it through workerd), and Docker's exec endpoints
 * as workerd's `ctx.container.exec` uses them (fake-native.test.ts drives those through workerd).
 */
import { existsSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { createConnection } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type ContainerRecord, FakeDockerEngine } from "./engine.ts";
import { standInImage } from "./images.ts";
import { pidNamespaceOf, processesIn } from "./proc.ts";

const engines: FakeDockerEngine[] = [];

afterEach(async () => {
  await Promise.all(engines.splice(0).map((engine) => engine.close()));
});

async function engine(): Promise<FakeDockerEngine> {
  const started = await FakeDockerEngine.start({ image: standInImage() });
  engines.push(started);
  return started;
}

function call(
  target: FakeDockerEngine,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: target.socketPath, method, path, headers: { host: "localhost" } },
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
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const NAME = `workerd-test-Sandbox-${"ab".repeat(32)}`;

describe("fake Docker engine", () => {
  it("answers an unknown request with 500 and keeps it as a problem", async () => {
    const docker = await engine();
    const answer = await call(docker, "GET", "/containers/json?all=1");
    expect(answer.status).toBe(500);
    expect(docker.problems).toEqual(["unknown Docker API request: GET /containers/json?all=1"]);
  });

  it("records a container's lifecycle and the Durable Object it serves; delete leaves no process", async () => {
    const docker = await engine();
    const created = await call(docker, "POST", `/containers/create?name=${NAME}`, {
      Image: "remote-task-harness",
      Env: ["A=1"],
      HostConfig: { NetworkMode: `container:${NAME}-proxy` },
    });
    expect(created.status).toBe(201);
    expect((await call(docker, "POST", `/containers/${NAME}/start`)).status).toBe(204);
    await expect
      .poll(async () => JSON.parse((await call(docker, "GET", `/containers/${NAME}/json`)).body))
      .toMatchObject({ State: { Status: "running", Running: true } });
    const record = docker.records[0];
    expect(record).toMatchObject({ name: NAME, durableObjectId: "ab".repeat(32), env: ["A=1"] });
    await expect.poll(() => record?.events.some((e) => e.event === "running")).toBe(true);
    const pid = Number(record?.events.find((e) => e.event === "running")?.detail);
    const namespace = await pidNamespaceOf(pid);
    expect(namespace).toMatch(/^pid:\[\d+\]$/);
    expect(processesIn(namespace as string).length).toBeGreaterThan(0);
    expect((await call(docker, "DELETE", `/containers/${NAME}?force=true`)).status).toBe(204);
    expect(record?.deleted).toBe(true);
    expect(record?.events.map((e) => e.event)).toEqual([
      "create",
      "start",
      "running",
      "delete",
      "exit",
    ]);
    expect(processesIn(namespace as string)).toEqual([]);
    expect(docker.live).toEqual([]);
    expect((await call(docker, "GET", `/containers/${NAME}/json`)).status).toBe(404);
    expect(docker.problems).toEqual([]);
  });
});

/** What an attached exec start gave back: the status line, the frames' payloads, the raw bytes. */
interface Hijacked {
  status: string;
  contentType: string | undefined;
  stdout: string;
  stderr: string;
  raw: string;
}

/** Docker multiplexed frames (stream 1 stdout, 2 stderr) split into the two outputs. */
function demultiplex(bytes: Buffer): { stdout: string; stderr: string } {
  const out: Record<number, Buffer[]> = { 1: [], 2: [] };
  let at = 0;
  while (at + 8 <= bytes.length) {
    const length = bytes.readUInt32BE(at + 4);
    out[bytes[at] ?? 0]?.push(bytes.subarray(at + 8, at + 8 + length));
    at += 8 + length;
  }
  return {
    stdout: Buffer.concat(out[1] ?? []).toString("utf8"),
    stderr: Buffer.concat(out[2] ?? []).toString("utf8"),
  };
}

/** `POST /exec/{id}/start` hijacked as workerd sends it (`Upgrade: tcp`), `stdin` then EOF. */
function startHijacked(target: FakeDockerEngine, id: string, stdin = ""): Promise<Hijacked> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path: target.socketPath, allowHalfOpen: true });
    const body = JSON.stringify({ Detach: false, Tty: false });
    socket.write(
      `POST /v1.43/exec/${id}/start HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n` +
        `Content-Length: ${body.length}\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n${body}`,
    );
    socket.end(stdin);
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("end", () => {
      const all = Buffer.concat(chunks);
      const split = all.indexOf("\r\n\r\n");
      const head = all.subarray(0, split).toString("latin1").split("\r\n");
      const rest = all.subarray(split + 4);
      resolve({
        status: head[0] ?? "",
        contentType: head.find((l) => /^content-type:/i.test(l))?.split(": ")[1],
        ...demultiplex(rest),
        raw: rest.toString("utf8"),
      });
    });
  });
}

/** A started container of the fake engine running `entrypoint`, once its process runs. */
async function running(docker: FakeDockerEngine, name = NAME): Promise<ContainerRecord> {
  await call(docker, "POST", `/containers/create?name=${name}`, {
    Image: "remote-task-harness",
    Env: ["FROM_CONTAINER=1"],
    Cmd: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"],
    HostConfig: { NetworkMode: `container:${name}-proxy` },
  });
  await call(docker, "POST", `/containers/${name}/start`);
  return docker.records.at(-1) as ContainerRecord;
}

async function createExec(
  docker: FakeDockerEngine,
  config: Record<string, unknown>,
  name = NAME,
): Promise<string> {
  const created = await call(docker, "POST", `/v1.43/containers/${name}/exec`, {
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    ...config,
  });
  expect(created.status).toBe(201);
  return (JSON.parse(created.body) as { Id: string }).Id;
}

async function execState(docker: FakeDockerEngine, id: string) {
  return JSON.parse((await call(docker, "GET", `/v1.43/exec/${id}/json`)).body) as {
    Running: boolean;
    ExitCode: number | null;
  };
}

describe("fake Docker engine: exec", () => {
  it("runs a command in the container with its cwd and env: frames apart, stdin piped, exit code", async () => {
    const docker = await engine();
    const record = await running(docker);
    const id = await createExec(docker, {
      Cmd: [
        "/bin/bash",
        "-c",
        'echo "$PWD $GREETING $FROM_CONTAINER"; tr a-z A-Z; echo err >&2; exit 5',
      ],
      Env: ["GREETING=hello there"],
      WorkingDir: "/tmp",
    });
    expect(await execState(docker, id)).toMatchObject({ Running: false, ExitCode: null });
    const answer = await startHijacked(docker, id, "piped in\n");
    expect(answer).toMatchObject({
      status: "HTTP/1.1 101 UPGRADED",
      contentType: "application/vnd.docker.raw-stream",
      stdout: "/tmp hello there 1\nPIPED IN\n",
      stderr: "err\n",
    });
    expect(await execState(docker, id)).toMatchObject({ Running: false, ExitCode: 5 });
    expect(record.execs).toMatchObject([
      { id, cwd: "/tmp", env: ["GREETING=hello there"], exitCode: 5 },
    ]);
    expect(docker.problems).toEqual([]);
  });

  it("runs it in the container's own namespaces (its processes, its host name)", async () => {
    const docker = await engine();
    const record = await running(docker);
    const id = await createExec(docker, { Cmd: ["/bin/sh", "-c", "hostname; echo $$"] });
    const answer = await startHijacked(docker, id);
    const [hostname, pid] = answer.stdout.trim().split("\n");
    expect(hostname).toBe(record.id.slice(0, 12));
    // A pid of the container's PID namespace: a small number, not the host's.
    expect(Number(pid)).toBeLessThan(100);
  });

  it("sends a TTY session's output raw, stdout and stderr merged", async () => {
    const docker = await engine();
    await running(docker);
    const id = await createExec(docker, {
      Cmd: ["/bin/sh", "-c", "echo out; echo err >&2"],
      Tty: true,
    });
    const answer = await startHijacked(docker, id);
    expect(answer.raw).toBe("out\nerr\n");
  });

  it("runs a detached start (how workerd sends kill()) and reports its exit code", async () => {
    const docker = await engine();
    const record = await running(docker);
    const id = await createExec(docker, {
      Cmd: ["/bin/sh", "-c", "echo detached > /workspace/mark; exit 7"],
      AttachStdin: false,
      AttachStdout: false,
      AttachStderr: false,
    });
    const started = await call(docker, "POST", `/v1.43/exec/${id}/start`, {
      Detach: true,
      Tty: false,
    });
    expect(started.status).toBe(200);
    await expect.poll(async () => (await execState(docker, id)).ExitCode).toBe(7);
    expect(readFileSync(`${record.workspace}/mark`, "utf8")).toBe("detached\n");
    expect(record.execs[0]).toMatchObject({ detached: true, exitCode: 7 });
  });

  it("ends a command whose container is killed under it with 137", async () => {
    const docker = await engine();
    const record = await running(docker);
    const id = await createExec(docker, {
      Cmd: ["/bin/sh", "-c", "touch /workspace/started; exec sleep 600"],
    });
    const answer = startHijacked(docker, id);
    await expect.poll(() => existsSync(`${record.workspace}/started`)).toBe(true);
    expect(await execState(docker, id)).toMatchObject({ Running: true, ExitCode: null });
    docker.kill(record);
    // The stream ends, and the exit code is known when it does.
    expect((await answer).status).toBe("HTTP/1.1 101 UPGRADED");
    expect(await execState(docker, id)).toMatchObject({ Running: false, ExitCode: 137 });
  });

  it("runs a command sent during a cold start once the container's process runs", async () => {
    const docker = await engine();
    let endColdStart = () => {};
    docker.faults = { startGate: new Promise<void>((resolve) => (endColdStart = resolve)) };
    const record = await running(docker);
    const id = await createExec(docker, { Cmd: ["/bin/sh", "-c", "echo ran"] });
    const answer = startHijacked(docker, id);
    await expect.poll(() => record.execs[0]?.startedAt).toBeDefined();
    expect(record.events.map((e) => e.event)).toEqual(["create", "start"]);
    endColdStart();
    expect((await answer).stdout).toBe("ran\n");
    const runningAt = record.events.find((e) => e.event === "running")?.at ?? Number.NaN;
    expect(record.execs[0]?.startedAt).toBeLessThanOrEqual(runningAt);
  });

  it("reports a command that cannot run as Docker does (127), and refuses a stopped container", async () => {
    const docker = await engine();
    await running(docker);
    const id = await createExec(docker, { Cmd: ["/no/such/program"] });
    const answer = await startHijacked(docker, id);
    expect(answer.stderr).toMatch(/ENOENT/);
    expect(await execState(docker, id)).toMatchObject({ ExitCode: 127 });
    const other = `${NAME.slice(0, -2)}cd`;
    await call(docker, "POST", `/containers/create?name=${other}`, { Image: "x" });
    const refused = await call(docker, "POST", `/containers/${other}/exec`, { Cmd: ["true"] });
    expect(refused.status).toBe(409);
    expect((await call(docker, "GET", "/exec/0123abcd/json")).status).toBe(404);
  });
});
