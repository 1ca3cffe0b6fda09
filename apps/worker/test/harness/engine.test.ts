/**
 * The fake Docker engine on its own: what it records, and that it fails loudly on what it does
 * not know (the suite in worker.test.ts drives it through workerd).
 */
import { request } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { FakeDockerEngine } from "./engine.ts";
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
