/**
 * Kernel keyrings and System V / POSIX IPC under isolation none. A uid's keyrings (`@u`, `@us`,
 * its persistent keyring) outlive its processes, and sandbox uids are reused: a key one call
 * stored would be read by the next call given the same uid; and a process's session keyring is
 * inherited, so every command would share the bridge's. Message queues, shared memory and
 * semaphores likewise outlive the call that made them, in the host's IPC namespace. No namespace
 * helps with keyrings without bubblewrap (which refuses the keyring system calls: seccomp.ts), and
 * Node can make none of these calls itself, so each command starts through a short Perl program
 * (Perl is part of every Debian and most other systems). Where the bridge may (root with
 * `CAP_SYS_ADMIN`), the program starts as root, gives the command an IPC namespace of its own
 * (`unshare(CLONE_NEWIPC)`: its queues, shared memory and semaphores go with it) and only then
 * takes the sandbox's uid and gid with no supplementary groups; then it joins a fresh anonymous
 * session keyring, empties the uid's keyrings and runs the shell. Without Perl the backend warns
 * and keyrings and IPC objects are shared between the calls of a uid.
 */
import { spawnSync } from "node:child_process";

/** System call numbers on each architecture. */
const SYSCALLS: Record<
  string,
  { keyctl: number; unshare: number; setgroups: number; setresgid: number; setresuid: number }
> = {
  x64: { keyctl: 250, unshare: 272, setgroups: 116, setresgid: 119, setresuid: 117 },
  arm64: { keyctl: 219, unshare: 97, setgroups: 159, setresgid: 149, setresuid: 147 },
};

const CLONE_NEWIPC = 0x0800_0000;

const JOIN_SESSION_KEYRING = 1;
const CLEAR = 7;
const UNLINK = 9;
const GET_PERSISTENT = 22;
const USER_KEYRING = -4;
const USER_SESSION_KEYRING = -5;
const SESSION_KEYRING = -3;

/** The descriptor on which the program reads the command's environment. */
export const ENV_FD = 4;

/**
 * The Perl program (for `perl -e`, the shell and its arguments after `--`), or undefined on an
 * architecture whose numbers are not known here. Perl itself runs with an empty environment (the
 * request's variables, such as PERL5OPT or LD_PRELOAD, must not change what it does); it reads
 * the command's environment from descriptor {@link ENV_FD} (`NAME=value` entries, each ended by
 * NUL), closes it and passes that environment to the shell. With `privateIpc` it is started as
 * root with the sandbox's uid as its first argument (before the shell): it makes the IPC
 * namespace, then becomes that uid (and gid); any failure ends it (125) before the command runs.
 */
export function freshKeyringsProgram(
  arch: string = process.arch,
  privateIpc = false,
): string | undefined {
  const nrs = SYSCALLS[arch];
  if (nrs === undefined) return undefined;
  const nr = nrs.keyctl;
  return [
    ...(privateIpc
      ? [
          // A number, not a string: syscall() passes a string as a pointer.
          "my $arg = shift @ARGV; $arg =~ /^[1-9][0-9]*$/ or exit 125; my $id = 0 + $arg;",
          `syscall(${nrs.unshare}, ${CLONE_NEWIPC}) == 0 or exit 125;`,
          `syscall(${nrs.setgroups}, 0, 0) == 0 or exit 125;`,
          `syscall(${nrs.setresgid}, $id, $id, $id) == 0 or exit 125;`,
          `syscall(${nrs.setresuid}, $id, $id, $id) == 0 or exit 125;`,
          "$< == $id && $> == $id or exit 125;",
        ]
      : []),
    `open(my $in, "<&=", ${ENV_FD}) or exit 125; my $env = do { local $/; <$in> }; close $in;`,
    "%ENV = map { split /=/, $_, 2 } split /\\0/, $env;",
    `syscall(${nr}, ${JOIN_SESSION_KEYRING}, 0) >= 0 or exit 125;`,
    `syscall(${nr}, ${CLEAR}, $_) for (${USER_KEYRING}, ${USER_SESSION_KEYRING});`,
    `my $p = syscall(${nr}, ${GET_PERSISTENT}, -1, ${SESSION_KEYRING});`,
    `if ($p > 0) { syscall(${nr}, ${CLEAR}, $p); syscall(${nr}, ${UNLINK}, $p, ${SESSION_KEYRING}); }`,
    "exec { $ARGV[0] } @ARGV or exit 127;",
  ].join(" ");
}

/** Whether `perl` (run as this process's user) may make a new IPC namespace here. */
export function canUnshareIpc(perl: string, arch: string = process.arch): boolean {
  const nrs = SYSCALLS[arch];
  if (nrs === undefined) return false;
  const probe = spawnSync(
    perl,
    ["-e", `exit(syscall(${nrs.unshare}, ${CLONE_NEWIPC}) == 0 ? 0 : 1)`],
    {
      stdio: "ignore",
      env: {},
    },
  );
  return probe.status === 0;
}

/** The Perl binary, when one runs here. */
export function findPerl(): string | undefined {
  for (const path of ["/usr/bin/perl", "/bin/perl"]) {
    const probe = spawnSync(path, ["-e", "exit 0"], { stdio: "ignore", env: {} });
    if (probe.status === 0) return path;
  }
  return undefined;
}
