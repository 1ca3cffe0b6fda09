/**
 * The argv a call's command runs with (`ctx.container.exec`): a POSIX `sh` script around the
 * caller's command, given the command, cwd and env names as arguments (never spliced into the
 * script; the env values travel as exec's `env`), so that a task on the Worker sees what it sees
 * on the local and docker backends:
 *
 * - **Shell**: the command runs with `/bin/bash -c` where the image has bash, else `/bin/sh -c`
 *   (as the docker backend does).
 * - **Working directory**: the script changes into `cwd` itself; a missing directory prints a
 *   per-call marker on stderr, which the Worker turns into a clear error naming the cwd.
 * - **Environment**: nothing of the container's own environment reaches the command but `PATH`
 *   (the image's); it gets `HOME`, `LANG`, `TMPDIR` (the local backend's values) and the caller's
 *   `env`, which wins over them.
 * - **End**: where the image has `setsid`, the command runs in a session of its own; when its
 *   shell exits, what it left running in that session is killed, so a background child holding
 *   stdout open (`(sleep 40 &)`) cannot hold the call open. A process that starts a session of its
 *   own escapes this and keeps the call open until it exits or the deadline destroys the container.
 * - **Standard input**: the call's stdin (exec's stdin stream) when it has one, else empty. What
 *   the command does not read is read after it exits, so its writer is never cut off.
 */

/** What every task gets unless the caller's `env` sets it (the local backend's values). */
const TASK_ENV_DEFAULTS = ["HOME=/workspace", "LANG=C.UTF-8", "TMPDIR=/tmp"] as const;

/** Where exec starts the script (every image has it); the script enters the call's cwd. */
export const SCRIPT_CWD = "/";

/**
 * The script; its arguments: command, cwd, marker, `1` when the call has stdin, then the names
 * of the caller's env entries (valid shell names, checked by the protocol).
 */
const SCRIPT = [
  "cmd=$1 cwd=$2 marker=$3 input=$4; shift 4",
  'cd -- "$cwd" 2>/dev/null || { printf %s "$marker" >&2; exit 1; }',
  // Each caller's name becomes NAME=value (the value read from exec's env), in "$@".
  'for __rt_name do eval "__rt_value=\\$$__rt_name"; set -- "$@" "$__rt_name=$__rt_value"; shift; done',
  "shell=/bin/sh; [ -x /bin/bash ] && shell=/bin/bash",
  "runner=; command -v setsid >/dev/null 2>&1 && runner=setsid",
  'if [ "$input" = 1 ]; then exec 3<&0; else exec 3</dev/null; fi',
  `env -i PATH="$PATH" ${TASK_ENV_DEFAULTS.join(" ")} "$@" $runner "$shell" -c "$cmd" <&3 3<&- &`,
  "pid=$!",
  "exec 3<&-",
  'wait "$pid"; code=$?',
  '[ -n "$runner" ] && kill -KILL "-$pid" 2>/dev/null',
  // What the command left of its stdin is read to its end, so that the platform's writer of it
  // finishes cleanly (an exec whose stdin is cut off mid-write is reported as a lost connection).
  '[ "$input" = 1 ] && cat >/dev/null 2>&1',
  'exit "$code"',
].join("\n");

/** The line the script prints on stderr, alone, when `cwd` is not a directory it can enter. */
export function missingCwdMarker(nonce: string): string {
  return `remote-task:${nonce}:cwd-missing\n`;
}

export interface TaskArgvInput {
  command: string;
  cwd: string;
  /** Names of the caller's env entries (the values travel as exec's `env`, never in argv). */
  envNames: readonly string[];
  /** Random per call: the missing-cwd marker cannot be guessed by the command's own output. */
  nonce: string;
  /** Whether the command reads the call's stdin (else empty input). */
  stdin: boolean;
}

/** The argv of one task's exec (see the top of this file). */
export function taskArgv(input: TaskArgvInput): string[] {
  return [
    "/bin/sh",
    "-c",
    SCRIPT,
    "remote-task",
    input.command,
    input.cwd,
    missingCwdMarker(input.nonce),
    input.stdin ? "1" : "0",
    ...input.envNames,
  ];
}

/** The command, cwd and env names a {@link taskArgv} carries, or `undefined` for another argv. */
export function readTaskArgv(
  argv: readonly string[],
): { command: string; cwd: string; stdin: boolean; envNames: string[] } | undefined {
  if (argv[2] !== SCRIPT || argv.length < 8) return undefined;
  return {
    command: argv[4] as string,
    cwd: argv[5] as string,
    stdin: argv[7] === "1",
    envNames: argv.slice(8),
  };
}
