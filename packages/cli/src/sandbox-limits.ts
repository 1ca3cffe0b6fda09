/**
 * The per-sandbox limits of a bridge this program starts (`serve`, and `run`, `run-many`,
 * `health` with `--local` or `--docker`): `--processes`, `--memory-mib`, `--workspace-mib`,
 * `--tmp-mib`, the same for every command and both backends.
 */
import { type Command, InvalidArgumentError } from "commander";

export interface LimitFlags {
  processes?: number | undefined;
  memoryMib?: number | undefined;
  workspaceMib?: number | undefined;
  tmpMib?: number | undefined;
}

/** The option names of the limits, as commander stores them. */
export const LIMIT_OPTIONS = ["processes", "memoryMib", "workspaceMib", "tmpMib"] as const;

const MiB = 1024 * 1024;

function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError("expected an integer > 0.");
  return n;
}

/** Adds the limit flags; `scope` says which sandboxes they apply to. */
export function limitOptions(command: Command, scope: string): Command {
  return command
    .option(
      "--processes <n>",
      `most processes and threads per sandbox${scope} (default 256)`,
      positiveInteger,
    )
    .option("--memory-mib <n>", `memory per sandbox in MiB${scope} (default 2048)`, positiveInteger)
    .option(
      "--workspace-mib <n>",
      `size of /workspace per sandbox in MiB${scope} (default 1024)`,
      positiveInteger,
    )
    .option(
      "--tmp-mib <n>",
      `size of /tmp per sandbox in MiB${scope} (default 256)`,
      positiveInteger,
    );
}

/** The limits given on the command line, as backend options (the backend's defaults for the rest). */
export function sandboxLimits(flags: LimitFlags) {
  return {
    ...(flags.processes === undefined ? {} : { processes: flags.processes }),
    ...(flags.memoryMib === undefined ? {} : { memoryBytes: flags.memoryMib * MiB }),
    ...(flags.workspaceMib === undefined ? {} : { workspaceBytes: flags.workspaceMib * MiB }),
    ...(flags.tmpMib === undefined ? {} : { tmpBytes: flags.tmpMib * MiB }),
  };
}
