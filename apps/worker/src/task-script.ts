/**
 * The bash script the container server runs for a task, around the caller's command, so that a
 * task on the Worker sees what it sees on the local backend:
 *
 * - **Working directory**: the script changes into `cwd` itself (the server is given `/`, which
 *   every image has). A missing directory prints a marker the backend turns into a clear error
 *   naming the cwd, instead of the server's `ENOENT posix_spawn '/bin/bash'` that names the shell.
 * - **Environment**: everything the container server runs with (the platform's `CLOUDFLARE_*`
 *   variables, the SDK's own settings) is removed; the task gets `PATH` (the image's), `HOME`,
 *   `LANG`, `TMPDIR` and the caller's `env`, as on the local backend.
 * - **End**: the command runs in a session (process group) of its own; when its shell exits, what
 *   it left running in that group is killed, so a background child holding stdout open
 *   (`(sleep 40 &)`) cannot hold the call open, as on the local backend. A process that starts a
 *   session of its own (`setsid`) escapes this and keeps the call open until it exits or the
 *   deadline, when the container is destroyed.
 * - **Standard input**: the call's stdin, when it has one, is a file the backend wrote outside
 *   /workspace; the script opens it, removes it, and gives the open file to the command as its
 *   standard input, so the command reads the bytes then end of input, and a command that does
 *   not read it is not held up. Without stdin the command's input is empty (`/dev/null`).
 */

/** What every task gets unless the caller's `env` sets it (the local backend's values). */
const TASK_ENV_DEFAULTS: Readonly<Record<string, string>> = {
  HOME: "/workspace",
  LANG: "C.UTF-8",
  TMPDIR: "/tmp",
};

/** Where the container server starts the script (it exists in every image). */
export const SCRIPT_CWD = "/";

/** Where the call's stdin is written in the container: outside /workspace, removed before the command runs. */
export function stdinPath(nonce: string): string {
  return `/tmp/.remote-task-stdin-${nonce}`;
}

/** A POSIX shell word that stands for `text` exactly. */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/** The line the script prints on stderr, alone, when `cwd` is not a directory it can enter. */
export function missingCwdMarker(nonce: string): string {
  return `remote-task:${nonce}:cwd-missing\n`;
}

export interface TaskScriptInput {
  command: string;
  cwd: string;
  /** Names of the caller's env entries (the values travel as the SDK's `env`, never in the script). */
  envNames: readonly string[];
  /** Random per call: the missing-cwd marker cannot be guessed by the command's own output. */
  nonce: string;
  /** The file holding the call's stdin ({@link stdinPath}), or `undefined` for empty input. */
  stdinFile?: string | undefined;
}

/** The bash script around one task's command (see the top of this file). */
export function taskScript(input: TaskScriptInput): string {
  const keep = ["PATH", ...input.envNames].join("|");
  const defaults = Object.entries(TASK_ENV_DEFAULTS)
    .filter(([name]) => !input.envNames.includes(name))
    .map(([name, value]) => `${name}=${shellQuote(value)}`)
    .join(" ");
  const stdin = input.stdinFile;
  return [
    // Opened, then removed whatever follows, so the command reads it though it has no name.
    ...(stdin === undefined
      ? []
      : [`exec 3<${shellQuote(stdin)}`, `rm -f -- ${shellQuote(stdin)}`]),
    `cd -- ${shellQuote(input.cwd)} 2>/dev/null || { printf %s ${shellQuote(missingCwdMarker(input.nonce))} >&2; exit 1; }`,
    `for __rt_name in $(compgen -e); do case "$__rt_name" in ${keep}) ;; *) unset "$__rt_name" 2>/dev/null ;; esac; done`,
    "unset __rt_name",
    ...(defaults === "" ? [] : [`export ${defaults}`]),
    // A command started with `&` by a shell without job control reads /dev/null.
    ...(stdin === undefined
      ? [`/usr/bin/setsid /bin/bash -c ${shellQuote(input.command)} &`, "__rt_pid=$!"]
      : [
          `/usr/bin/setsid /bin/bash -c ${shellQuote(input.command)} <&3 3<&- &`,
          "__rt_pid=$!",
          "exec 3<&-",
        ]),
    'wait "$__rt_pid"',
    "__rt_code=$?",
    'kill -KILL -- "-$__rt_pid" 2>/dev/null',
    'exit "$__rt_code"',
  ].join("\n");
}
