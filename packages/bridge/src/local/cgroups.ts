/**
 * Per-sandbox cgroups. Each controller the bridge needs (`pids`, `memory`) is used from the
 * hierarchy that has it: the unified (v2) hierarchy when it offers the controller and the bridge
 * may hand it to children (v2 lets only the root cgroup do that while it holds processes, and the
 * bridge's own cgroup holds the bridge: so it must run in the root cgroup), otherwise the v1
 * hierarchy of that controller. Hybrid machines (v1 controllers beside a v2 mount without them)
 * take the v1 path.
 *
 * Layout, in each hierarchy used: `<the bridge's own cgroup>/remote-task/<instance>/<slot>`. A slot
 * is reused by one sandbox after another (limits are written once; counters are read before and
 * after each call), which avoids creating and removing a memory cgroup per call.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { readdir, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { isInstanceName, ownerAlive } from "../host/ownership.js";
import { pollUntil, signal } from "./processes.js";

type Controller = "pids" | "memory";
const CONTROLLERS: readonly Controller[] = ["pids", "memory"];

interface Hierarchy {
  version: 1 | 2;
  /** `<mount><own cgroup>/remote-task`. */
  base: string;
  controllers: Controller[];
}

/** Which cgroup version enforces each controller; reported by `/health`. */
type CgroupEnforcement = Partial<Record<Controller, "cgroup-v1" | "cgroup-v2">>;

/** Files of each version; the only difference between the v1 and v2 paths. */
const FILES = {
  1: {
    memoryMax: "memory.limit_in_bytes",
    swapMax: "memory.memsw.limit_in_bytes",
    memoryEvents: "memory.oom_control",
  },
  2: { memoryMax: "memory.max", swapMax: "memory.swap.max", memoryEvents: "memory.events" },
} as const;

interface Mount {
  root: string;
  point: string;
  type: string;
  options: string[];
}

function mounts(): Mount[] {
  const text = readFileSync("/proc/self/mountinfo", "utf8");
  const found: Mount[] = [];
  for (const line of text.split("\n")) {
    // "id parent major:minor root point options [optional...] - type source superoptions"
    const [before, after] = line.split(" - ");
    if (before === undefined || after === undefined) continue;
    const fields = before.split(" ");
    const [type, , superOptions = ""] = after.split(" ");
    if (type !== "cgroup" && type !== "cgroup2") continue;
    found.push({
      root: unescapeMount(fields[3] ?? "/"),
      point: unescapeMount(fields[4] ?? ""),
      type,
      options: superOptions.split(","),
    });
  }
  return found;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMount(path: string): string {
  return path.replace(/\\([0-7]{3})/g, (_, octal: string) =>
    String.fromCharCode(Number.parseInt(octal, 8)),
  );
}

/** `/proc/self/cgroup`: the cgroup path of this process per hierarchy (`""` key: v2). */
function ownCgroups(): Map<string, string> {
  const own = new Map<string, string>();
  for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (match === null) continue;
    for (const controller of (match[1] ?? "").split(",")) own.set(controller, match[2] ?? "/");
  }
  return own;
}

/** The directory of cgroup `path` under a mount of its hierarchy, if the mount shows it. */
function directoryOf(mount: Mount, path: string): string | undefined {
  if (mount.root === "/") return join(mount.point, path);
  if (path === mount.root || path.startsWith(`${mount.root}/`))
    return join(mount.point, path.slice(mount.root.length));
  return undefined;
}

function tryWrite(file: string, value: string): boolean {
  try {
    writeFileSync(file, value);
    return true;
  } catch {
    return false;
  }
}

function words(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split(/\s+/).filter(Boolean);
  } catch {
    return [];
  }
}

/** v2: whether `controllers` can be given to the children of `dir` (and are, afterwards). */
function delegate(dir: string, controllers: Controller[]): boolean {
  const enabled = words(join(dir, "cgroup.subtree_control"));
  const missing = controllers.filter((c) => !enabled.includes(c));
  if (missing.length === 0) return true;
  return tryWrite(join(dir, "cgroup.subtree_control"), missing.map((c) => `+${c}`).join(" "));
}

function makeBase(dir: string): boolean {
  try {
    mkdirSync(dir, { recursive: true });
    return true;
  } catch {
    return false;
  }
}

/** The hierarchies this process may create sandbox cgroups in, or none. */
function discover(): Hierarchy[] {
  let all: Mount[];
  let own: Map<string, string>;
  try {
    all = mounts();
    own = ownCgroups();
  } catch {
    return [];
  }
  const hierarchies: Hierarchy[] = [];
  const wanted = new Set<Controller>(CONTROLLERS);
  const unified = all.find((m) => m.type === "cgroup2");
  const unifiedPath = own.get("");
  if (unified !== undefined && unifiedPath !== undefined) {
    const dir = directoryOf(unified, unifiedPath);
    const offered = dir === undefined ? [] : words(join(dir, "cgroup.controllers"));
    const controllers = CONTROLLERS.filter((c) => offered.includes(c));
    if (dir !== undefined && controllers.length > 0) {
      const base = join(dir, "remote-task");
      if (delegate(dir, controllers) && makeBase(base) && delegate(base, controllers)) {
        hierarchies.push({ version: 2, base, controllers });
        for (const c of controllers) wanted.delete(c);
      }
    }
  }
  for (const controller of wanted) {
    const mount = all.find((m) => m.type === "cgroup" && m.options.includes(controller));
    const path = own.get(controller);
    if (mount === undefined || path === undefined) continue;
    const dir = directoryOf(mount, path);
    if (dir === undefined) continue;
    const same = hierarchies.find((h) => h.version === 1 && h.base === join(dir, "remote-task"));
    if (same !== undefined) {
      same.controllers.push(controller);
      continue;
    }
    const base = join(dir, "remote-task");
    if (makeBase(base)) hierarchies.push({ version: 1, base, controllers: [controller] });
  }
  return hierarchies;
}

// cgroup files live in memory: reading and writing them synchronously costs microseconds, less
// than a round trip through the thread pool.

/** Kills every process in the cgroup `dir` (v2 `cgroup.kill`, else SIGKILL each member). */
function killAll(dir: string): void {
  if (existsSync(join(dir, "cgroup.kill"))) {
    tryWrite(join(dir, "cgroup.kill"), "1");
    return;
  }
  for (const pid of members(dir)) signal(pid, "SIGKILL");
}

function members(dir: string): number[] {
  return words(join(dir, "cgroup.procs")).map(Number);
}

/**
 * Kills everything in `dir` until it is empty (a process that forked while being killed is
 * caught on the next round), within `limitMs`.
 */
function killUntilEmpty(dir: string, limitMs: number): Promise<boolean> {
  return pollUntil(async () => {
    if (members(dir).length === 0) return true;
    killAll(dir);
    return false;
  }, limitMs);
}

/** One cgroup per used hierarchy, holding the processes of one sandbox at a time. */
export interface CgroupSlot {
  /** One directory per hierarchy; the first one's `cgroup.procs` lists the sandbox's processes. */
  readonly dirs: string[];
  /** Counters that grow when a limit is hit; compare before and after a call. */
  counters(): { oomKills: number; pidsMaxHits: number };
  /** SIGKILLs everything inside until empty; false if processes remain after `limitMs`. */
  killAll(limitMs: number): Promise<boolean>;
  /** SIGKILLs everything inside once, synchronously (at process exit). */
  killNow(): void;
  /** Sends `name` to every process inside but `except`; returns how many there were. */
  signal(name: NodeJS.Signals, except?: number): number;
  /**
   * True when every process that was inside is reaped: an exited process whose parent has not
   * reaped it yet still counts against `pids.max`, so the slot waits for this before its reuse.
   */
  drained(): boolean;
  /** Removes the cgroups (they must be empty). */
  remove(): void;
}

/** The cgroups of one backend instance. */
export interface CgroupSet {
  enforcement: CgroupEnforcement;
  /** Creates slot `index` with the limits (`memoryBytes`, `processes`) it enforces. */
  slot(index: number, limits: { processes: number; memoryBytes: number }): CgroupSlot;
  /** Removes the instance's directories (slots must be removed first). */
  remove(): void;
}

function counter(file: string, key: string): number {
  try {
    const match = new RegExp(`^${key} (\\d+)$`, "m").exec(readFileSync(file, "utf8"));
    return match === null ? 0 : Number(match[1]);
  } catch {
    return 0;
  }
}

/**
 * Sets up the cgroups of backend instance `instance`, or returns undefined where this process
 * cannot create cgroups (not root and no delegated subtree, no cgroup file system, macOS).
 */
export function createCgroupSet(instance: string): CgroupSet | undefined {
  const hierarchies = discover().filter((h) => {
    const dir = join(h.base, instance);
    return makeBase(dir) && (h.version === 1 || delegate(dir, h.controllers));
  });
  if (hierarchies.length === 0) return undefined;
  const enforcement: CgroupEnforcement = {};
  for (const h of hierarchies)
    for (const c of h.controllers) enforcement[c] = h.version === 2 ? "cgroup-v2" : "cgroup-v1";
  const with_ = (controller: Controller) =>
    hierarchies.find((h) => h.controllers.includes(controller));

  return {
    enforcement,
    slot(index, limits) {
      const dirs = hierarchies.map((h) => join(h.base, instance, String(index)));
      for (const dir of dirs) mkdirSync(dir, { recursive: true });
      const pids = with_("pids");
      const memory = with_("memory");
      const dirOf = (h: Hierarchy) => join(h.base, instance, String(index));
      if (pids !== undefined)
        writeFileSync(join(dirOf(pids), "pids.max"), String(limits.processes));
      if (memory !== undefined) {
        const files = FILES[memory.version];
        const dir = dirOf(memory);
        writeFileSync(join(dir, files.memoryMax), String(limits.memoryBytes));
        // No swap beyond the limit (v1: memory+swap equals the limit; v2: no swap at all).
        if (existsSync(join(dir, files.swapMax)))
          tryWrite(
            join(dir, files.swapMax),
            memory.version === 2 ? "0" : String(limits.memoryBytes),
          );
      }
      const primary = dirs[0] as string;
      return {
        dirs,
        counters() {
          return {
            oomKills:
              memory === undefined
                ? 0
                : counter(join(dirOf(memory), FILES[memory.version].memoryEvents), "oom_kill"),
            pidsMaxHits: pids === undefined ? 0 : counter(join(dirOf(pids), "pids.events"), "max"),
          };
        },
        killAll: (limitMs) => killUntilEmpty(primary, limitMs),
        signal(name, except) {
          const targets = members(primary).filter((pid) => pid !== except);
          for (const pid of targets) signal(pid, name);
          return targets.length;
        },
        killNow: () => killAll(primary),
        drained() {
          if (members(primary).length > 0) return false;
          return pids === undefined || words(join(dirOf(pids), "pids.current"))[0] === "0";
        },
        remove() {
          for (const dir of dirs) rmdirSync(dir);
        },
      };
    },
    remove() {
      for (const h of hierarchies) {
        try {
          rmdirSync(join(h.base, instance));
        } catch {
          // a slot is still busy; the next backend's sweep removes it
        }
      }
    },
  };
}

/**
 * Kills the processes of backend instances whose owner is dead and removes their cgroups, in
 * every hierarchy this process can use. Never touches a live owner's cgroups.
 */
export async function sweepCgroups(limitMs: number): Promise<void> {
  for (const h of discover()) {
    const names = await readdir(h.base).catch(() => [] as string[]);
    for (const name of names) {
      if (!isInstanceName(name) || ownerAlive(name)) continue;
      const instanceDir = join(h.base, name);
      const slots = await readdir(instanceDir, { withFileTypes: true }).catch(() => []);
      for (const slot of slots) {
        if (!slot.isDirectory()) continue;
        const dir = join(instanceDir, slot.name);
        await killUntilEmpty(dir, limitMs);
        // Killed processes not yet reaped (by the host's init) keep the cgroup busy a moment.
        await pollUntil(
          () =>
            rmdir(dir).then(
              () => true,
              (error: NodeJS.ErrnoException) => error.code === "ENOENT",
            ),
          limitMs,
        );
      }
      await rmdir(instanceDir).catch(() => {});
    }
  }
}
