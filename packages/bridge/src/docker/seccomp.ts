/**
 * The seccomp profile of every container (the engine's JSON format), as strict as the local
 * backend's bubblewrap filter (local/seccomp.ts) and more: it replaces the engine's default
 * profile, so it also refuses what that one refuses a container without capabilities.
 *
 * - ENOSYS, as bubblewrap's filter answers: the kernel keyrings (`add_key`, `request_key`,
 *   `keyctl`: a uid's keyrings are the host's, shared with every process of that uid), Linux AIO
 *   (`io_setup`: `fs.aio-max-nr` is machine-wide) and io_uring; and `clone3`, whose flags seccomp
 *   cannot read, so that the C library falls back to `clone`.
 * - EPERM: `clone` and `unshare` with any namespace flag (a new user namespace gives a full
 *   capability set inside it, and Podman's default profile allows it), `setns`, and the system
 *   calls of mounts, modules, kexec, swap, accounting, the kernel log, BPF, perf events,
 *   userfaultfd, fanotify and the rest the engines' default profiles refuse.
 *
 * Everything else is allowed (the engines' defaults allow a list instead: a system call newer than
 * both lists is allowed here). Only the native ABIs of x86-64 and arm64 are listed: a 32-bit or x32
 * system call matches no architecture of the filter and is refused by the runtime.
 */

const ENOSYS = 38;
const EPERM = 1;

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
const NAMESPACE_FLAGS = [
  0x0002_0000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000,
];

const NOT_THERE = [
  "add_key",
  "request_key",
  "keyctl",
  "io_setup",
  "io_uring_setup",
  "io_uring_enter",
  "io_uring_register",
  "clone3",
];

const NOT_PERMITTED = [
  "setns",
  "mount",
  "umount2",
  "pivot_root",
  "chroot",
  "move_mount",
  "open_tree",
  "fsopen",
  "fsmount",
  "fsconfig",
  "fspick",
  "mount_setattr",
  "open_by_handle_at",
  "init_module",
  "finit_module",
  "delete_module",
  "kexec_load",
  "kexec_file_load",
  "reboot",
  "swapon",
  "swapoff",
  "acct",
  "syslog",
  "quotactl",
  "bpf",
  "perf_event_open",
  "userfaultfd",
  "fanotify_init",
  "lookup_dcookie",
  "kcmp",
  "process_madvise",
  "migrate_pages",
  "move_pages",
  "io_pgetevents",
  "sysfs",
  "uselib",
  "ustat",
  "vmsplice",
  "iopl",
  "ioperm",
  "settimeofday",
  "clock_settime",
  "sethostname",
  "setdomainname",
];

/** The profile (Docker's and Podman's `seccomp=` format). */
export function containerSeccompProfile(): Record<string, unknown> {
  const namespaceRules = ["clone", "unshare"].flatMap((name) =>
    NAMESPACE_FLAGS.map((flag) => ({
      names: [name],
      action: "SCMP_ACT_ERRNO",
      errnoRet: EPERM,
      args: [{ index: 0, value: flag, valueTwo: flag, op: "SCMP_CMP_MASKED_EQ" }],
    })),
  );
  return {
    defaultAction: "SCMP_ACT_ALLOW",
    architectures: ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
    syscalls: [
      { names: NOT_THERE, action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS },
      { names: NOT_PERMITTED, action: "SCMP_ACT_ERRNO", errnoRet: EPERM },
      ...namespaceRules,
    ],
  };
}
