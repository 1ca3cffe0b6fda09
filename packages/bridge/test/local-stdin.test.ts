import { createHash, randomBytes } from "node:crypto";
import { readdir, rm } from "node:fs/promises";
import { type ExecResult, execResultSchema } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../src/index.js";
import { createLocalBackend, type LocalBackend } from "../src/local/index.js";
import { type EmbeddedBridge, startEmbeddedBridge } from "../src/node.js";
import { expectError, freshId, leftoverCallDirs, makeTmpRoot } from "./helpers.js";
import { isolationModes } from "./isolation.js";

const MiB = 1024 * 1024;

describe.each(isolationModes)("stdin on the local backend, $title", ({ mode, skip }) => {
  let tmpRoot: string;
  let backend: LocalBackend;
  let bridge: EmbeddedBridge<LocalBackend>;

  beforeAll(async () => {
    if (skip) return;
    tmpRoot = await makeTmpRoot("rt-stdin-");
    backend = createLocalBackend({ isolation: mode, killGraceMs: 300, tmpRoot });
    bridge = await startEmbeddedBridge({ backend, logger: silentLogger });
  });

  afterAll(async () => {
    if (skip) return;
    await bridge.close();
    await backend.close();
    expect(await readdir(tmpRoot)).toEqual([]);
    await rm(tmpRoot, { recursive: true, force: true });
  });

  const post = (body: Record<string, unknown>) =>
    fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
      body: JSON.stringify({ sandboxId: freshId("stdin"), timeoutSeconds: 20, ...body }),
    });

  const run = async (command: string, stdin?: unknown): Promise<ExecResult> => {
    const response = await post({ command, ...(stdin === undefined ? {} : { stdin }) });
    const json: unknown = await response.json();
    expect(response.status, JSON.stringify(json)).toBe(200);
    return execResultSchema.parse(json);
  };

  it.skipIf(skip)("delivers text exactly, then end of input", { timeout: 20_000 }, async () => {
    const text = "line one\nzwei: ü, 三\n\ttabs and no final newline";
    const result = await run("cat; echo; echo END", text);
    expect(result).toMatchObject({ outcome: "exited", code: 0 });
    expect(result.stdout).toBe(`${text}\nEND\n`);
  });

  it.skipIf(skip)(
    "delivers binary bytes (base64) exactly: every byte value, 512 KiB",
    { timeout: 20_000 },
    async () => {
      const bytes = Buffer.concat([
        Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
        randomBytes(512 * 1024 - 256),
      ]);
      const digest = createHash("sha256").update(bytes).digest("hex");
      const both = await run('tee "$TMPDIR/in" | wc -c; sha256sum < "$TMPDIR/in"', {
        base64: bytes.toString("base64"),
      });
      expect(both).toMatchObject({ outcome: "exited", code: 0 });
      expect(both.stdout).toBe(`${bytes.length}\n${digest}  -\n`);
    },
  );

  it.skipIf(skip)("a call without stdin reads empty input", { timeout: 20_000 }, async () => {
    const result = await run("cat; echo rc=$?");
    expect(result).toMatchObject({ outcome: "exited", code: 0, stdout: "rc=0\n" });
  });

  it.skipIf(skip)(
    "a command that does not read 1 MiB of stdin is not held up by it, and nothing breaks",
    { timeout: 30_000 },
    async () => {
      const stdin = { base64: randomBytes(MiB).toString("base64") };
      const results = await Promise.all([
        run("true", stdin),
        run("exit 3", stdin),
        run("head -c 5 | wc -c", stdin),
        run("sleep 0.3; echo done", stdin),
      ]);
      expect(results.map((r) => [r.outcome, r.code])).toEqual([
        ["exited", 0],
        ["exited", 3],
        ["exited", 0],
        ["exited", 0],
      ]);
      expect(results[2]?.stdout).toBe("5\n");
      expect(results[3]?.stdout).toBe("done\n");
      // Each exited, none timed out (20 s): nothing waited for the input to be read.
      expect(backend.liveSandboxes()).toBe(0);
      expect(await leftoverCallDirs(backend)).toEqual([]);
    },
  );

  it.skipIf(skip)(
    "refuses stdin over limits.maxStdinBytes with 413, before running anything",
    { timeout: 20_000 },
    async () => {
      const before = backend.stats().started;
      const text = await post({ command: "cat", stdin: "x".repeat(MiB + 1) });
      const body = await expectError(text, "payload_too_large");
      expect(body.error).toMatch(/stdin/i);
      const binary = await post({
        command: "cat",
        stdin: { base64: Buffer.alloc(MiB + 1).toString("base64") },
      });
      await expectError(binary, "payload_too_large");
      expect(backend.stats().started).toBe(before);
      // Exactly the limit is accepted.
      const full = await run("wc -c", { base64: Buffer.alloc(MiB, 7).toString("base64") });
      expect(full.stdout.trim()).toBe(String(MiB));
    },
  );
});
