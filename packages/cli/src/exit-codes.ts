/** Exit codes of the command line, besides the remote command's own exit code. */
export const EXIT = {
  ok: 0,
  /** A task (or, for run-many, at least one task) failed. */
  failed: 1,
  /** Wrong flags or arguments. */
  usage: 2,
  /** The command hit its deadline, as `timeout(1)` reports it. */
  timeout: 124,
  /** The task could not be run: configuration, connection, authentication or bridge error. */
  bridge: 125,
  /** Interrupted (Ctrl-C, SIGINT) or cancelled: 128 + 2, as a shell reports it. */
  interrupted: 130,
  /** Stopped by SIGTERM: 128 + 15, as a shell reports it. */
  terminated: 143,
  /** The reader of stdout went away (`| head`): what a shell reports for a tool ended by SIGPIPE. */
  outputClosed: 141,
} as const;
