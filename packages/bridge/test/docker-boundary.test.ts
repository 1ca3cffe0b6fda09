/**
 * The docker backend's boundary on a real engine (see docker-engine.ts): the containers' seccomp
 * profile refuses the kernel keyrings, AIO and new user namespaces, and each container's user is a
 * uid of its own that no host account has.
 */

import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBridge } from "../src/bridge.js";
import { createDockerBackend, type DockerBackend } from "../src/docker/index.js";
import { CONTAINER_UIDS } from "../src/docker/users.js";
import { silentLogger } from "../src/logger.js";
import { noEngineReason, requireEngine, skipDocker } from "./docker-engine.js";
import { runSyscall } from "./syscall-program.js";

const TOKEN = "docker-boundary-token";
let counter = 0;

/**
 * x86-64 numbers: keyctl 250 (KEYCTL_GET_KEYRING_ID of the user keyring, creating it), io_setup
 * 206, unshare 272, io_uring_setup 425 (Podman's default profile refuses that one too).
 */
const PROBES = [
  runSyscall("keyctl", 250, [0, -4, 1], "/tmp/k"),
  runSyscall("aio", 206, [8, "buffer"], "/tmp/a"),
  runSyscall("userns", 272, [0x1000_0000], "/tmp/u"),
  runSyscall("uring", 425, [1, "buffer"], "/tmp/r"),
  "unshare -U -r id 2>/dev/null; echo unshare=$?",
].join("; ");

const hostUids = new Set(
  readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => Number(line.split(":")[2])),
);

if (skipDocker) it.skip(`docker boundary (SKIPPED: ${noEngineReason})`, () => {});
else
  describe("docker backend boundary", () => {
    let backend: DockerBackend;
    let bridge: ReturnType<typeof createBridge>;

    beforeAll(async () => {
      const { host, image, ulimits } = requireEngine();
      backend = createDockerBackend({ image, engine: host, ulimits, pool: 0 });
      await backend.ready;
      bridge = createBridge({ backend, token: TOKEN, logger: silentLogger });
    });
    afterAll(async () => {
      await bridge?.shutdown();
      await backend?.close();
    });

    async function exec(command: string) {
      const response = await bridge(
        new Request("http://bridge.test/exec", {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({
            sandboxId: `docker-boundary-${process.pid}-${counter++}`,
            command,
          }),
        }),
      );
      expect(response.status).toBe(200);
      return (await response.json()) as { stdout: string; stderr: string; code: number };
    }

    it.runIf(process.arch === "x64")(
      "refuses the keyrings, AIO and io_uring (ENOSYS) and new user namespaces (EPERM)",
      async () => {
        const { stdout } = await exec(PROBES);
        expect(stdout).toBe("keyctl=38\naio=38\nuserns=1\nuring=38\nunshare=1\n");
      },
    );

    it("runs each container as a uid of its own that is no host account, in no user namespace", async () => {
      const seen: number[] = [];
      for (let i = 0; i < 2; i++) {
        const { stdout } = await exec("id -u; id -g; cat /proc/self/uid_map");
        const [uid, gid, map] = stdout.split("\n");
        // No user namespace: the uid inside is the host's.
        expect(map?.trim().split(/\s+/)).toEqual(["0", "0", "4294967295"]);
        expect(Number(gid)).toBe(Number(uid));
        seen.push(Number(uid));
      }
      for (const uid of seen) {
        expect(uid).toBeGreaterThanOrEqual(CONTAINER_UIDS.first);
        expect(uid).toBeLessThanOrEqual(CONTAINER_UIDS.last);
        expect(hostUids.has(uid)).toBe(false);
      }
      expect(seen[0]).not.toBe(seen[1]);
    });
  });
