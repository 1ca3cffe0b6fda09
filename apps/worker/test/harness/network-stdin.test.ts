/**
 * A call's network policy and stdin against the real container plumbing: the Worker bundle, its
 * `TaskContainer` Durable Object and workerd's container client, with containers served by the
 * fake engine. What it cannot show: its containers have no network at all whatever the policy,
 * so these tests check what workerd tells each container's egress sidecar (`internet.enabled`,
 * which the real sidecar enforces), not traffic (podman.test.ts runs real containers).
 */
import { createHash, randomBytes } from "node:crypto";
import { errorBodySchema, execResultSchema, newSandboxId } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ContainerRecord, isLive } from "./engine.ts";
import { type Answer, WorkerHarness } from "./worker.ts";

/** The stdin limit the bridge reports by default (1 MiB). */
const MAX_STDIN_BYTES = 1_048_576;

let harness: WorkerHarness;

beforeAll(async () => {
  harness = await WorkerHarness.start();
}, 120_000);

afterEach(() => {
  expect(harness.engine.problems).toEqual([]);
});

afterAll(async () => {
  try {
    const deadline = Date.now() + 15_000;
    while (harness.engine.live.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(harness.engine.live.map((record) => record.name)).toEqual([]);
  } finally {
    await harness?.close();
  }
}, 60_000);

function id(): string {
  return newSandboxId("harness");
}

function result(answer: Answer) {
  expect(answer.status, answer.text).toBe(200);
  return execResultSchema.parse(JSON.parse(answer.text));
}

/** The one container of `sandboxId`, once it is gone. */
async function onlyContainer(sandboxId: string): Promise<ContainerRecord> {
  await expect
    .poll(async () => (await harness.containersOf(sandboxId)).filter(isLive).length, {
      timeout: 10_000,
    })
    .toBe(0);
  const containers = await harness.containersOf(sandboxId);
  expect(containers).toHaveLength(1);
  return containers[0] as ContainerRecord;
}

/** What workerd told the container's egress sidecar about the internet, every time it did. */
function internet(record: ContainerRecord): Array<boolean | undefined> {
  return record.egress.map((config) => config.internet?.enabled);
}

describe("network policy, through the real Durable Object", () => {
  it("starts a call's container with the internet off unless the call asks for open", async () => {
    const quiet = id();
    expect(result(await harness.exec({ sandboxId: quiet, command: "echo quiet" })).stdout).toBe(
      "quiet\n",
    );
    const noneAsked = id();
    result(await harness.exec({ sandboxId: noneAsked, command: "true", network: "none" }));
    const open = id();
    result(await harness.exec({ sandboxId: open, command: "true", network: "open" }));
    const seen = {
      quiet: internet(await onlyContainer(quiet)),
      none: internet(await onlyContainer(noneAsked)),
      open: internet(await onlyContainer(open)),
    };
    expect(seen.quiet.length, JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen).toEqual({
      quiet: seen.quiet.map(() => false),
      none: seen.none.map(() => false),
      open: seen.open.map(() => true),
    });
  });
});

describe("an allowlist, through the real Durable Object and the built Worker's egress gate", () => {
  it("answers the container's HTTP to hosts and addresses the allowlist does not name with the gate's 403", async () => {
    const sandboxId = id();
    // The fake engine carries intercepted HTTP through a proxy in the container (on Cloudflare the
    // interception is transparent), so the command names it.
    const fetchCode = (url: string) =>
      `curl -s -x http://127.0.0.1:3128 -o /tmp/body -w '%{http_code} ' ${url}; head -c 35 /tmp/body; echo`;
    const answer = result(
      await harness.exec({
        sandboxId,
        command: [
          fetchCode("http://example.com/"),
          fetchCode("http://169.254.169.254/latest/meta-data/"),
        ].join("; "),
        network: { allow: ["pypi.org"] },
      }),
    );
    expect(answer.stdout).toBe(
      "403 remote-task egress: request refused\n403 remote-task egress: request refused\n",
    );
    const record = await onlyContainer(sandboxId);
    expect(record.outbound.map((entry) => entry.status)).toEqual([403, 403]);
    expect(internet(record).every((enabled) => enabled === false)).toBe(true);
  });
});

describe("stdin, through the real Durable Object", () => {
  it("arrives byte for byte, binary included, then end of input", async () => {
    const bytes = Buffer.concat([
      Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
      randomBytes(200_000),
    ]);
    const sandboxId = id();
    const answer = result(
      await harness.exec({
        sandboxId,
        // `cat` ends only at end of input; the second reads nothing more.
        command: "cat > /tmp/got; cat | wc -c; wc -c < /tmp/got; sha256sum < /tmp/got | cut -c1-64",
        stdin: { base64: bytes.toString("base64") },
      }),
    );
    const digest = createHash("sha256").update(bytes).digest("hex");
    expect(answer).toMatchObject({ code: 0, stdout: `0\n${bytes.length}\n${digest}\n` });
    await onlyContainer(sandboxId);
  });

  it("takes text, and leaves no file of it in /workspace or /tmp", async () => {
    const answer = result(
      await harness.exec({
        sandboxId: id(),
        command: "cat; echo '[workspace]'; ls -A /workspace; echo '[tmp]'; ls -A /tmp",
        stdin: "héllo\n",
      }),
    );
    const [read, listings] = answer.stdout.split("[workspace]\n");
    expect(read).toBe("héllo\n");
    const [workspace, tmp] = (listings ?? "").split("[tmp]\n");
    expect(workspace).toBe("");
    // workerd keeps the pid files of its execs in /tmp; none holds stdin.
    expect(
      tmp?.split("\n").filter((name) => name !== "" && !name.startsWith(".workerd-exec-")),
    ).toEqual([]);
  });

  it("does not hold up a command that reads none of it, or only part", async () => {
    const stdin = "x".repeat(MAX_STDIN_BYTES);
    const ignored = result(await harness.exec({ sandboxId: id(), command: "echo ignored", stdin }));
    expect(ignored).toMatchObject({ code: 0, stdout: "ignored\n" });
    const head = result(await harness.exec({ sandboxId: id(), command: "head -c 5", stdin }));
    expect(head).toMatchObject({ code: 0, stdout: "xxxxx" });
  });

  it("takes exactly the limit and answers 413 beyond it, with no container started", async () => {
    expect((await harness.health()).limits?.maxStdinBytes).toBe(MAX_STDIN_BYTES);
    const at = result(
      await harness.exec({
        sandboxId: id(),
        command: "wc -c",
        stdin: { base64: randomBytes(MAX_STDIN_BYTES).toString("base64") },
      }),
    );
    expect(at.stdout).toBe(`${MAX_STDIN_BYTES}\n`);
    const sandboxId = id();
    const beyond = await harness.exec({
      sandboxId,
      command: "wc -c",
      stdin: { base64: randomBytes(MAX_STDIN_BYTES + 1).toString("base64") },
    });
    expect(beyond.status).toBe(413);
    expect(errorBodySchema.parse(JSON.parse(beyond.text)).code).toBe("payload_too_large");
    expect(await harness.containersOf(sandboxId)).toEqual([]);
  });
});
