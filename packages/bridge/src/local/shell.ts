import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";

/**
 * The sandbox's `/bin/sh -c` script: a few builtins, then the command, all on the command's first
 * line (so the shell's messages keep their line numbers). Builtins cost no extra program start:
 *
 * - the gate: `read` blocks until the bridge has put the shell in the sandbox's cgroups, so not one
 *   process of the command starts outside them; then the gate descriptor is closed;
 * - `ulimit`: the per-process limits where no cgroup enforces them;
 * - setup lines, such as starting the network relay (relay.ts).
 */
export interface ShellPrelude {
  /** Wait for one line on descriptor 3 before running the command. */
  gate: boolean;
  /** `ulimit` options and values, e.g. `[["-d", 1048576]]`. */
  ulimits: ReadonlyArray<readonly [string, number]>;
  /** Lines run after the limits, before the command (the network relay's start). */
  setup?: readonly string[] | undefined;
  /** The shell runs with `-p` (bash): turn it off before the command. */
  privileged?: boolean | undefined;
}

/** Descriptor of the gate in the sandbox's shell. */
export const GATE_FD = 3;

/** The `sh -c` script of a sandbox: the prelude (gate, limits, setup), then `command`. */
export function shellScript(command: string, prelude: ShellPrelude): string {
  const parts: string[] = [];
  // Exit without running anything when the bridge closes the gate instead of opening it.
  if (prelude.gate) parts.push(`read -r _ <&${GATE_FD} || exit 125`, `exec ${GATE_FD}<&-`);
  // One resource per `ulimit`: dash takes no more.
  for (const [flag, value] of prelude.ulimits) parts.push(`ulimit ${flag} ${value}`);
  parts.push(...(prelude.setup ?? []));
  if (prelude.privileged === true) parts.push("set +p");
  return parts.length === 0 ? command : `${parts.join("; ")}; ${command}`;
}

/**
 * The `ulimit` flag for the process count of `shell` here: `-u` (bash, busybox) or `-p` (dash),
 * or undefined when it has neither.
 */
export function processLimitFlag(shell = "/bin/sh"): string | undefined {
  for (const flag of ["-u", "-p"]) {
    const probe = spawnSync(shell, ["-c", `ulimit ${flag}`], {
      stdio: ["ignore", "pipe", "ignore"],
      env: {},
    });
    if (probe.status === 0 && /^(\d+|unlimited)\s*$/.test(probe.stdout.toString())) return flag;
  }
  return undefined;
}

/**
 * The shell commands run with: bash wherever the host has it (the Worker and other bridges run
 * bash, so `[[ ... ]]` and `{a,b}` behave the same everywhere; under bubblewrap it is visible
 * because the system directories are), else `/bin/sh`. It must be executable by every user (the
 * sandboxes' uids).
 */
export function findShell(): { path: string; args: string[] } {
  for (const path of ["/bin/bash", "/usr/bin/bash"]) {
    try {
      const stat = statSync(path);
      // `-p`: no BASH_ENV, no functions or SHELLOPTS from the environment while the prelude (the
      // gate, the ulimits) runs; `set +p` before the command (shellScript).
      if (stat.isFile() && (stat.mode & 0o001) !== 0) return { path, args: ["-p", "-c"] };
    } catch {}
  }
  return { path: "/bin/sh", args: ["-c"] };
}
