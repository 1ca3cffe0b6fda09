import { spawnSync } from "node:child_process";

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
}

/** Descriptor of the gate in the sandbox's shell. */
export const GATE_FD = 3;

export function shellScript(command: string, prelude: ShellPrelude): string {
  const parts: string[] = [];
  // Exit without running anything when the bridge closes the gate instead of opening it.
  if (prelude.gate) parts.push(`read -r _ <&${GATE_FD} || exit 125`, `exec ${GATE_FD}<&-`);
  // One resource per `ulimit`: dash takes no more.
  for (const [flag, value] of prelude.ulimits) parts.push(`ulimit ${flag} ${value}`);
  parts.push(...(prelude.setup ?? []));
  return parts.length === 0 ? command : `${parts.join("; ")}; ${command}`;
}

/**
 * The `ulimit` flag for the process count of `/bin/sh` here: `-u` (bash, busybox) or `-p` (dash),
 * or undefined when it has neither.
 */
export function processLimitFlag(): string | undefined {
  for (const flag of ["-u", "-p"]) {
    const probe = spawnSync("/bin/sh", ["-c", `ulimit ${flag}`], {
      stdio: ["ignore", "pipe", "ignore"],
      env: {},
    });
    if (probe.status === 0 && /^(\d+|unlimited)\s*$/.test(probe.stdout.toString())) return flag;
  }
  return undefined;
}
