/**
 * Kernel keyrings under isolation none. A uid's keyrings (`@u`, `@us`, its persistent keyring)
 * outlive its processes, and sandbox uids are reused: a key one call stored would be read by the
 * next call given the same uid; and a process's session keyring is inherited, so every command
 * would share the bridge's. No namespace helps without bubblewrap (which refuses the keyring
 * system calls: seccomp.ts), and Node cannot make the calls itself, so each command starts
 * through a short Perl program (Perl is part of every Debian and most other systems) that joins a
 * fresh anonymous session keyring, empties the uid's keyrings, then runs the shell. Without Perl
 * the backend warns and keyrings are shared between the calls of a uid.
 */
import { spawnSync } from "node:child_process";

/** `keyctl`'s system call number on each architecture. */
const KEYCTL: Record<string, number> = { x64: 250, arm64: 219 };

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
 * NUL), closes it and passes that environment to the shell.
 */
export function freshKeyringsProgram(arch: string = process.arch): string | undefined {
  const nr = KEYCTL[arch];
  if (nr === undefined) return undefined;
  return [
    `open(my $in, "<&=", ${ENV_FD}) or exit 125; my $env = do { local $/; <$in> }; close $in;`,
    "%ENV = map { split /=/, $_, 2 } split /\\0/, $env;",
    `syscall(${nr}, ${JOIN_SESSION_KEYRING}, 0) >= 0 or exit 125;`,
    `syscall(${nr}, ${CLEAR}, $_) for (${USER_KEYRING}, ${USER_SESSION_KEYRING});`,
    `my $p = syscall(${nr}, ${GET_PERSISTENT}, -1, ${SESSION_KEYRING});`,
    `if ($p > 0) { syscall(${nr}, ${CLEAR}, $p); syscall(${nr}, ${UNLINK}, $p, ${SESSION_KEYRING}); }`,
    "exec { $ARGV[0] } @ARGV or exit 127;",
  ].join(" ");
}

/** The Perl binary, when one runs here. */
export function findPerl(): string | undefined {
  for (const path of ["/usr/bin/perl", "/bin/perl"]) {
    const probe = spawnSync(path, ["-e", "exit 0"], { stdio: "ignore", env: {} });
    if (probe.status === 0) return path;
  }
  return undefined;
}
