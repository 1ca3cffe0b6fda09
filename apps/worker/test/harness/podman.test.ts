/**
 * The built Worker under Miniflare on real containers: its `TaskContainer` Durable Object and
 * workerd's container client, Podman behind the harness's shim (podman-shim.ts), the project's
 * test image (busybox and bash). What a call promises, checked in real containers: the shell, the
 * cwd and env, stdin, exact output, exit codes, the network, the deadline, and that every
 * container is removed. Looks only at the containers this file's shim created.
 */
import { createHash, randomBytes } from "node:crypto";
import { errorBodySchema, execResultSchema, newSandboxId } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PodmanShim, podmanForTests } from "./podman-shim.ts";
import { type Answer, WorkerHarness } from "./worker.ts";

let harness: WorkerHarness<PodmanShim>;
/** Skipped where no Podman engine can start, except under REMOTE_TASK_REQUIRE_DOCKER=1 (CI). */
const found = podmanForTests();

beforeAll(async () => {
  if (found.skip) return;
  harness = await WorkerHarness.startOnPodman(
    { vars: { HEDGE_START_AFTER_MS: "off" } },
    found.engine,
  );
}, 120_000);

afterAll(async () => {
  if (found.skip) return;
  try {
    // Destroyed on every path: each container this file's calls started is deleted.
    const left = () => harness.engine.containers.filter((c) => !c.deleted).map((c) => c.name);
    const deadline = Date.now() + 30_000;
    while (left().length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(left()).toEqual([]);
    expect(harness.engine.containers.length).toBeGreaterThan(5);
    expect(harness.engine.problems).toEqual([]);
  } finally {
    await harness?.close();
  }
}, 90_000);

function id(): string {
  return newSandboxId("podman");
}

function result(answer: Answer) {
  expect(answer.status, answer.text).toBe(200);
  return execResultSchema.parse(JSON.parse(answer.text));
}

/** The containers the shim created for `sandboxId`. */
async function containersOf(sandboxId: string) {
  const doId = await harness.durableObjectId(sandboxId);
  return harness.engine.containers.filter((c) => c.durableObjectId === doId);
}

describe.skipIf(found.skip)("the Worker on real containers (Podman)", () => {
  it("returns exit codes and keeps stdout and stderr apart, in bash, in /workspace", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({
        sandboxId,
        command: 'echo "$BASH_VERSION" | cut -c1; pwd; echo err >&2; exit 3',
      }),
    );
    expect(answer).toMatchObject({ stdout: "5\n/workspace\n", stderr: "err\n", code: 3 });
    expect(await containersOf(sandboxId)).toHaveLength(1);
    await expect.poll(async () => (await containersOf(sandboxId))[0]?.deleted).toBe(true);
  });

  it("gives the command its cwd, the caller's env and the defaults, and nothing of the container's", async () => {
    const answer = result(
      await harness.exec({
        sandboxId: id(),
        command:
          'pwd; echo "$GREETING|$HOME|$LANG|$TMPDIR"; env | cut -d= -f1 | sort | tr "\\n" " "',
        cwd: "/tmp",
        env: { GREETING: "hello 'there'" },
      }),
    );
    const [cwd, values, names] = answer.stdout.split("\n");
    expect(cwd).toBe("/tmp");
    expect(values).toBe("hello 'there'|/workspace|C.UTF-8|/tmp");
    // What bash itself sets aside, only PATH, the defaults and the caller's names.
    const extra = (names ?? "")
      .trim()
      .split(" ")
      .filter((name) => !["PWD", "SHLVL", "_", "OLDPWD"].includes(name));
    expect(extra).toEqual(["GREETING", "HOME", "LANG", "PATH", "TMPDIR"]);
  });

  it("answers 400 naming a cwd that does not exist, and runs nothing", async () => {
    const answer = await harness.exec({ sandboxId: id(), command: "echo ran", cwd: "/nowhere" });
    expect(answer.status).toBe(400);
    const body = errorBodySchema.parse(JSON.parse(answer.text));
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.[0]?.path).toEqual(["cwd"]);
    expect(body.error).toContain("/nowhere");
  });

  it("streams stdin byte for byte, then end of input", async () => {
    const bytes = randomBytes(300_000);
    const answer = result(
      await harness.exec({
        sandboxId: id(),
        command: "cat > /tmp/got; wc -c < /tmp/got; sha256sum < /tmp/got | cut -c1-64",
        stdin: { base64: bytes.toString("base64") },
      }),
    );
    const digest = createHash("sha256").update(bytes).digest("hex");
    expect(answer.stdout).toBe(`${bytes.length}\n${digest}\n`);
  });

  it("is not held up by stdin a command does not read", async () => {
    const answer = result(
      await harness.exec({ sandboxId: id(), command: "echo ignored", stdin: "x".repeat(1 << 20) }),
    );
    expect(answer).toMatchObject({ code: 0, stdout: "ignored\n" });
  });

  it("passes output through with exact byte counts, capped", async () => {
    const answer = result(
      await harness.exec({
        sandboxId: id(),
        command: "head -c 3000000 /dev/zero | tr '\\0' y",
        maxOutputBytes: 65_536,
      }),
    );
    expect(answer).toMatchObject({ stdoutBytes: 3_000_000, stdoutTruncated: true, code: 0 });
    expect(answer.stdout.length).toBe(65_536);
  });

  it("does not wait for a background child that holds stdout", async () => {
    const answer = result(
      await harness.exec({
        sandboxId: id(),
        command: "(sleep 40 &); echo done",
        timeoutSeconds: 30,
      }),
    );
    expect(answer).toMatchObject({ outcome: "exited", stdout: "done\n" });
  });

  it("gives a call with no network only the loopback interface, and open its own network", async () => {
    const none = result(await harness.exec({ sandboxId: id(), command: "ls /sys/class/net" }));
    expect(none.stdout).toBe("lo\n");
    const openId = id();
    const open = result(
      await harness.exec({ sandboxId: openId, command: "ls /sys/class/net", network: "open" }),
    );
    expect(open.stdout.split("\n")).toContain("eth0");
    expect((await containersOf(openId))[0]?.network).toBe("bridge");
  });

  it("runs an allowlisted call with the internet off and the interception's CA in place", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({
        sandboxId,
        command: 'ls /sys/class/net; test -s "$SSL_CERT_FILE" && echo ca',
        network: { allow: ["pypi.org"] },
      }),
    );
    expect(answer.stdout).toBe("lo\nca\n");
    expect((await containersOf(sandboxId))[0]?.network).toBe("none");
  });

  it("kills a command at its deadline and removes its container", async () => {
    const sandboxId = id();
    const answer = result(
      await harness.exec({ sandboxId, command: "echo started; sleep 60", timeoutSeconds: 3 }),
    );
    expect(answer).toMatchObject({ outcome: "timeout", code: 124, stdout: "started\n" });
    await expect.poll(async () => (await containersOf(sandboxId))[0]?.deleted).toBe(true);
  });

  it("cancels a running call and removes its container", async () => {
    const sandboxId = id();
    const running = harness.exec({ sandboxId, command: "echo started; sleep 60" });
    await expect.poll(async () => (await containersOf(sandboxId)).length).toBe(1);
    await expect
      .poll(async () => JSON.parse((await harness.cancel(sandboxId)).text).cancelled, {
        timeout: 20_000,
      })
      .toBe(true);
    expect(result(await running)).toMatchObject({ outcome: "cancelled" });
    await expect.poll(async () => (await containersOf(sandboxId))[0]?.deleted).toBe(true);
  });
});
