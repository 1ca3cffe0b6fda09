import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { readdir, readlink, rm } from "node:fs/promises";
import { join } from "node:path";
import { createLocalBackend } from "@remote-task/bridge/local";
import { request } from "undici";
import { describe, expect, it } from "vitest";
import { waitFor } from "./support/bridge.js";
import { type BridgeProcess, startBridgeProcess } from "./support/bridge-process.js";
import { skipBwrap } from "./support/isolation.js";
import { commandLine, descendants, processList } from "./support/processes.js";
import { makeTmpRoot } from "./support/tmp-root.js";

/** `sleep` processes whose argument carries `marker`. */
function sleepers(marker: string): number[] {
  return processList()
    .filter((p) => p.comm === "sleep" && p.state !== "Z")
    .filter((p) => commandLine(p.pid).includes(marker))
    .map((p) => p.pid);
}

const newMarker = () => `1000.${process.pid}${randomBytes(3).readUIntBE(0, 3)}`;

/** Starts `command` on the bridge without waiting for its answer (the bridge may die first). */
function fire(bridge: BridgeProcess, command: string): void {
  void request(`${bridge.url}/exec`, {
    method: "POST",
    headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
    body: JSON.stringify({ sandboxId: `crash-${randomBytes(4).toString("hex")}`, command }),
  })
    .then((response) => response.body.text())
    .catch(() => {});
}

/**
 * Runs `sleep & setsid sleep & sleep` (one of them out of the process group) on the bridge and
 * waits until all three run; returns their marker.
 */
async function startSleepers(bridge: BridgeProcess): Promise<string> {
  const marker = newMarker();
  fire(bridge, `sleep ${marker} & setsid sleep ${marker} & sleep ${marker}`);
  await waitFor(
    () => sleepers(marker).length === 3,
    10_000,
    () => "the sandbox started",
  );
  return marker;
}

/** The backend directory a bridge made in `tmpRoot` (`remote-task-<instance>`). */
async function stateDirs(tmpRoot: string): Promise<string[]> {
  return (await readdir(tmpRoot)).filter((name) => name.startsWith("remote-task-"));
}

/** The cgroup directories of a backend instance, in the hierarchies this machine has. */
function cgroupDirs(instance: string): string[] {
  const own = readFileSync("/proc/self/cgroup", "utf8");
  return ["pids", "memory"].flatMap((controller) => {
    const path = new RegExp(`^\\d+:[^:]*\\b${controller}\\b[^:]*:(.*)$`, "m").exec(own)?.[1];
    return path === undefined
      ? []
      : [join("/sys/fs/cgroup", controller, path, "remote-task", instance)];
  });
}

/** uid claims held by `instance` (a root bridge records them in /run/remote-task-uids). */
async function uidClaims(instance: string): Promise<string[]> {
  const dir = "/run/remote-task-uids";
  const claims: string[] = [];
  for (const name of await readdir(dir).catch(() => [] as string[]))
    if ((await readlink(join(dir, name)).catch(() => "")) === instance) claims.push(name);
  return claims;
}

/**
 * Starts a backend in `tmpRoot` and checks that its sweep removed everything of the dead
 * `instance` (directory, cgroups, uid claims); closed, it leaves `tmpRoot` empty.
 */
async function expectSweptBy(
  isolation: "none" | "bwrap",
  tmpRoot: string,
  instance: string,
): Promise<void> {
  const next = createLocalBackend({ isolation, tmpRoot });
  await next.ready;
  expect(await stateDirs(tmpRoot)).not.toContain(`remote-task-${instance}`);
  for (const cgroup of cgroupDirs(instance)) expect(existsSync(cgroup), cgroup).toBe(false);
  expect(await uidClaims(instance)).toEqual([]);
  await next.close();
  expect(await readdir(tmpRoot)).toEqual([]);
}

/** The helper that starts a bridge's sandboxes (a `node -e` child of the bridge process). */
function spawnerOf(bridgePid: number): number {
  const helper = descendants(bridgePid).find((p) => commandLine(p.pid)[1] === "-e");
  if (helper === undefined) throw new Error(`bridge ${bridgePid} has no sandbox helper`);
  return helper.pid;
}

describe("a bridge killed with SIGKILL (issue 12, finding 5)", () => {
  it("isolation none: the command dies with the bridge, setsid escapes included, and the next start removes what is left", async () => {
    const tmpRoot = await makeTmpRoot("rt-crash-");
    const dead = await startBridgeProcess("none", { tmpRoot });
    try {
      const marker = await startSleepers(dead);
      const [dir = ""] = await stateDirs(tmpRoot);
      const instance = dir.slice("remote-task-".length);
      process.kill(dead.pid, "SIGKILL");
      // The setsid one leaves the process group; only the cgroup still holds it.
      const expected = process.getuid?.() === 0 ? 0 : 1;
      await waitFor(
        () => sleepers(marker).length === expected,
        10_000,
        () => "the sandbox died",
      );
      await expectSweptBy("none", tmpRoot, instance);
      expect(sleepers(marker)).toEqual([]);
    } finally {
      await dead.close();
      await rm(tmpRoot, { recursive: true, force: true });
    }
  }, 60_000);

  it("isolation none: with its helper killed first, what the bridge left running is killed by the next start, whose sweep leaves a live bridge's sandbox alone", async () => {
    const tmpRoot = await makeTmpRoot("rt-crash-");
    const dead = await startBridgeProcess("none", { tmpRoot });
    const live = await startBridgeProcess("none", { tmpRoot });
    try {
      const orphans = await startSleepers(dead);
      const kept = newMarker();
      const dirs = await stateDirs(tmpRoot);
      const instance = dirs
        .find((name) => name.includes(`remote-task-${dead.pid}.`))
        ?.slice("remote-task-".length) as string;
      expect(instance, dirs.join(" ")).toBeDefined();
      const deadCgroups = cgroupDirs(instance).filter((dir) => existsSync(dir));
      const deadClaims = await uidClaims(instance);
      fire(live, `sleep ${kept}`);
      await waitFor(
        () => sleepers(kept).length === 1,
        10_000,
        () => "the live sandbox started",
      );

      // Nothing is left to take the command down: the helper goes first, then the bridge.
      process.kill(spawnerOf(dead.pid), "SIGKILL");
      process.kill(dead.pid, "SIGKILL");
      await waitFor(() => !existsSync(`/proc/${dead.pid}`), 10_000);
      expect(sleepers(orphans)).toHaveLength(3);

      const next = createLocalBackend({ isolation: "none", tmpRoot });
      await next.ready;
      expect(sleepers(orphans)).toEqual([]);
      expect(await stateDirs(tmpRoot)).not.toContain(`remote-task-${instance}`);
      if (process.getuid?.() === 0) {
        expect(deadCgroups.length).toBeGreaterThan(0);
        expect(deadClaims.length).toBeGreaterThan(0);
      }
      for (const dir of deadCgroups) expect(existsSync(dir), dir).toBe(false);
      expect(await uidClaims(instance)).toEqual([]);
      // The live bridge keeps its sandbox and its directory.
      expect(sleepers(kept)).toHaveLength(1);
      expect((await stateDirs(tmpRoot)).length).toBe(2);
      await next.close();
    } finally {
      await dead.close();
      await live.close();
      await rm(tmpRoot, { recursive: true, force: true });
    }
  }, 60_000);

  it.skipIf(skipBwrap)(
    "isolation bwrap: the command dies with the bridge, and the next start removes what is left",
    async () => {
      const tmpRoot = await makeTmpRoot("rt-crash-");
      const dead = await startBridgeProcess("bwrap", { tmpRoot });
      try {
        const marker = await startSleepers(dead);
        const [dir = ""] = await stateDirs(tmpRoot);
        const instance = dir.slice("remote-task-".length);
        process.kill(dead.pid, "SIGKILL");
        await waitFor(
          () => sleepers(marker).length === 0,
          10_000,
          () => "the sandbox died",
        );
        await expectSweptBy("bwrap", tmpRoot, instance);
      } finally {
        await dead.close();
        await rm(tmpRoot, { recursive: true, force: true });
      }
    },
    60_000,
  );
});
