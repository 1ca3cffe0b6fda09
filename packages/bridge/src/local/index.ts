/**
 * The local backend: a process per call in a fresh, confined sandbox. This module wires the
 * parts together and keeps the sandboxes in flight; the parts are
 *
 * - setup.ts: what is set up once (options, probes, state directory, uid pool, cgroups, report);
 * - sandbox.ts: one call's sandbox, from its spec to a running command;
 * - teardown.ts: stopping a sandbox's processes and handing its slot out again.
 */
import type { SandboxReport } from "@remote-task/protocol";
import { BackendError, type SandboxBackend } from "../backend.js";
import type { Endpoint } from "../host/egress-policy.js";
import { InFlight, type InFlightCounts } from "../host/in-flight.js";
import { cleanUpAtExit } from "../host/ownership.js";
import { settleWithin } from "./processes.js";
import { type Sandbox, startSandbox } from "./sandbox.js";
import {
  EXIT_WAIT_MS,
  type LocalBackendOptions,
  type LocalIsolation,
  setUpLocalHost,
} from "./setup.js";
import { removeCallDir } from "./state-dir.js";
import { releaseWhenDrained, terminate } from "./teardown.js";

export type { EgressOptions } from "../host/egress.js";
export type { Endpoint } from "../host/egress-policy.js";
export {
  DEFAULT_SANDBOX_LIMITS,
  DEFAULT_SANDBOX_UIDS,
  type SandboxLimits,
} from "../host/limits.js";
export { DEFAULT_ETC_ENTRIES } from "./bwrap.js";
export { isolationNoneGaps } from "./notes.js";
export {
  IsolationUnavailableError,
  type LocalBackendOptions,
  type LocalIsolation,
  type LocalIsolationOption,
} from "./setup.js";
export type { UidRange } from "./slots.js";

export interface LocalBackendStats extends InFlightCounts {
  /** Slots of destroyed sandboxes not handed out again yet (their last processes or leftovers). */
  draining: number;
}

/** The local backend: a process per call in a fresh, confined sandbox. */
export interface LocalBackend extends SandboxBackend {
  readonly name: "local";
  readonly isolation: LocalIsolation;
  /** How each sandbox is confined; reported by `/health`. */
  readonly sandbox: SandboxReport;
  /** The directory this backend owns (per-call directories, its passwd file); removed by close. */
  readonly stateDir: string;
  /** Resolves once what dead predecessors left behind is swept (`start` waits for it). */
  readonly ready: Promise<void>;
  /** Sandboxes started and not yet destroyed (0 after every call has ended). */
  liveSandboxes(): number;
  stats(): LocalBackendStats;
  /**
   * Never let a sandbox connect to `endpoint` (where the bridge itself listens: its port on any
   * address of this machine). `startEmbeddedBridge` calls it with its own address.
   */
  excludeFromEgress(endpoint: Endpoint): void;
  /** Stops every sandbox and removes everything the backend made. Idempotent. */
  close(): Promise<void>;
}

/**
 * Creates the local backend. The command never runs as host root: when the bridge is root each
 * sandbox gets an unprivileged uid of its own (`uids`), and bubblewrap adds a user namespace.
 * With `isolation: "auto"` bubblewrap is probed once (a real trial run) and used when it works;
 * `"bwrap"` throws {@link IsolationUnavailableError} when it does not.
 */
export function createLocalBackend(options: LocalBackendOptions = {}): LocalBackend {
  const host = setUpLocalHost(options);
  const bridgeEndpoints: Endpoint[] = [];
  const sandboxes = new InFlight<Sandbox>();
  let calls = 0;
  let closed = false;
  const draining = new Set<Promise<void>>();
  const unregisterExit = cleanUpAtExit(() => host.removeEverything(true));

  function destroy(sandboxId: string): Promise<void> {
    const sandbox = sandboxes.get(sandboxId);
    if (sandbox === undefined) return Promise.resolve();
    sandbox.destroying ??= (async () => {
      await sandbox.startup;
      let gone = true;
      try {
        gone = await terminate(host, sandbox);
        if (sandbox.root !== undefined) await removeCallDir(sandbox.root, host.onTmpfs);
      } finally {
        await sandbox.egress?.close();
        // A slot whose processes could not all be stopped is never handed out again.
        if (sandbox.slot !== undefined && gone) {
          const done =
            sandbox.drained === true
              ? host.releaseSlot(sandbox.slot)
              : releaseWhenDrained(host, sandbox.slot, await sandbox.nsInit);
          draining.add(done);
          void done.finally(() => draining.delete(done));
          // Under isolation none the slot is usually free again soon (once its leftovers are
          // removed). The next call takes another slot meanwhile; only when there is none does
          // the answer wait for this one, so the caller's next call finds it free.
          if (host.isolation === "none" && !host.pool.hasSpare()) {
            await settleWithin(done, host.killGraceMs);
          }
        }
        sandboxes.remove(sandboxId);
      }
      if (!gone) {
        throw new BackendError(
          "sandbox_error",
          `Processes of sandbox ${sandboxId} were still running ${host.killGraceMs + EXIT_WAIT_MS} ms after SIGKILL; its uid and cgroup are not reused.`,
        );
      }
    })();
    return sandbox.destroying;
  }

  return {
    name: "local",
    isolation: host.isolation,
    networkModes: host.networkModes,
    // Only bubblewrap gives a call an egress proxy of its own, where secrets go in.
    injectsSecrets: host.networkModes?.includes("allow") === true,
    sandbox: host.report,
    stateDir: host.stateDir,
    ready: host.ready,
    health: async () => ({ sandbox: host.report }),

    async start(spec) {
      const sandbox: Sandbox = { exited: Promise.resolve(), startup: Promise.resolve() };
      sandboxes.add(spec.sandboxId, sandbox);
      const running = startSandbox(host, spec, sandbox, {
        serial: ++calls,
        bridgeEndpoints: () => bridgeEndpoints,
        stop: () => void terminate(host, sandbox),
        closed: () => closed,
      });
      sandbox.startup = running.catch(() => {});
      return running;
    },

    destroy,

    liveSandboxes: () => sandboxes.size,
    stats: () => ({ ...sandboxes.counts(), draining: draining.size }),
    excludeFromEgress(endpoint) {
      bridgeEndpoints.push({ host: endpoint.host, port: endpoint.port });
    },

    async close() {
      if (closed) return;
      closed = true;
      await host.ready;
      await Promise.allSettled(sandboxes.ids().map(destroy));
      // Give the last slots a moment to drain, so their uids go back free.
      await settleWithin(Promise.allSettled(draining), host.killGraceMs + EXIT_WAIT_MS);
      unregisterExit();
      host.removeEverything(false);
    },
  };
}
