import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { newInstanceName } from "../src/host/ownership.js";
import { SlotPool } from "../src/local/slots.js";

it("hands free slots out least recently used first", async () => {
  const claimsDir = await mkdtemp(join(tmpdir(), "rt-claims-"));
  const pool = new SlotPool({
    instance: newInstanceName(),
    uids: { first: 1_898_000_000, count: 3 },
    claimsDir,
    cgroups: undefined,
    limits: { processes: 8, memoryBytes: 64 * 1024 * 1024 },
  });
  try {
    const [a, b, c] = [pool.acquire(), pool.acquire(), pool.acquire()];
    expect(pool.acquire()).toBeUndefined();
    for (const slot of [b, a, c]) if (slot !== undefined) pool.release(slot);
    expect([pool.acquire()?.uid, pool.acquire()?.uid, pool.acquire()?.uid]).toEqual([
      b?.uid,
      a?.uid,
      c?.uid,
    ]);
    for (const slot of [a, b, c]) if (slot !== undefined) pool.release(slot);
  } finally {
    pool.close(false);
    expect(await readdir(claimsDir)).toEqual([]);
    await rm(claimsDir, { recursive: true, force: true });
  }
});
