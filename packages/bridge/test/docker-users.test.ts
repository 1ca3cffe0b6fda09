/** The docker backend's container uids (src/docker/users.ts). */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { CONTAINER_UIDS, containerUsers, hostAccountUids } from "../src/docker/users.js";

describe("container users", () => {
  it("reads the host's account uids", () => {
    const dir = mkdtempSync(join(tmpdir(), "users-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const passwd = join(dir, "passwd");
    writeFileSync(passwd, "root:x:0:0::/root:/bin/sh\nsvc:x:60002:60002::/:/bin/false\n");
    expect([...hostAccountUids(passwd)]).toEqual([0, 60002]);
    expect(hostAccountUids(join(passwd, "missing")).size).toBe(0);
  });

  it("gives each container another uid of the range, never a host account's", () => {
    const taken = new Set([60_002, 60_003]);
    const next = containerUsers(taken);
    const size = CONTAINER_UIDS.last - CONTAINER_UIDS.first + 1;
    const seen = new Set<string>();
    for (let i = 0; i < size - taken.size; i++) {
      const user = next();
      const [uid, gid] = user.split(":").map(Number);
      expect(uid).toBe(gid);
      expect(uid).toBeGreaterThanOrEqual(CONTAINER_UIDS.first);
      expect(uid).toBeLessThanOrEqual(CONTAINER_UIDS.last);
      expect(taken.has(uid as number)).toBe(false);
      seen.add(user);
    }
    expect(seen.size).toBe(size - taken.size);
  });
});
