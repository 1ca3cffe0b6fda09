/**
 * The seccomp filter of every bubblewrap sandbox (given to bubblewrap's `--seccomp`): the system
 * calls of shared kernel state that no namespace confines answer ENOSYS, as if the kernel did not
 * have them, and everything else is allowed.
 *
 * - `add_key`, `request_key`, `keyctl`: the kernel keyrings. A uid's keyrings outlive its
 *   processes and the sandboxes reuse host uids, so a key one call stored would be there for the
 *   next call of the same uid (and the process's session keyring is the bridge's own).
 * - `io_setup`: Linux AIO contexts, counted against the host-wide `fs.aio-max-nr`; one sandbox
 *   could take them all. Programs that use AIO fall back to threads on ENOSYS (glibc's POSIX AIO
 *   never uses them).
 * - `io_uring_setup`: the same kind of shared, unaccounted kernel resource (and a large attack
 *   surface); container runtimes refuse it by default too.
 *
 * System calls of another ABI (32-bit, x32) could reach the same functions under other numbers:
 * the filter allows only the native one. The program is classic BPF, built here as bytes.
 */

const SECCOMP_RET_ALLOW = 0x7fff_0000;
const SECCOMP_RET_ERRNO = 0x0005_0000;
const ENOSYS = 38;
/** Offsets in `struct seccomp_data`. */
const NR_OFFSET = 0;
const ARCH_OFFSET = 4;
// BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K.
const LD_ABS = 0x20;
const JEQ = 0x15;
const JGE = 0x35;
const RET = 0x06;

interface Abi {
  arch: number;
  /** The first number of another ABI sharing this arch value (x32 on x86-64). */
  foreignFrom?: number;
  refused: number[];
}

/** add_key, request_key, keyctl, io_setup, io_uring_setup on each architecture. */
const ABIS: Record<string, Abi> = {
  x64: { arch: 0xc000_003e, foreignFrom: 0x4000_0000, refused: [248, 249, 250, 206, 425] },
  arm64: { arch: 0xc000_00b7, refused: [217, 218, 219, 0, 425] },
};

type Instruction = [code: number, jt: number, jf: number, k: number];

/** The filter for this process's architecture, or undefined where none is known. */
export function sandboxSeccompFilter(arch: string = process.arch): Buffer | undefined {
  const abi = ABIS[arch];
  if (abi === undefined) return undefined;
  const program: Instruction[] = [];
  const total = 3 + (abi.foreignFrom === undefined ? 0 : 1) + abi.refused.length + 2;
  /** The jump from the instruction about to be added to the last one (deny). */
  const toDeny = () => total - 1 - (program.length + 1);
  program.push([LD_ABS, 0, 0, ARCH_OFFSET]);
  program.push([JEQ, 0, toDeny(), abi.arch]); // not the native ABI: deny
  program.push([LD_ABS, 0, 0, NR_OFFSET]);
  if (abi.foreignFrom !== undefined) program.push([JGE, toDeny(), 0, abi.foreignFrom]);
  for (const nr of abi.refused) program.push([JEQ, toDeny(), 0, nr]);
  program.push([RET, 0, 0, SECCOMP_RET_ALLOW]);
  program.push([RET, 0, 0, SECCOMP_RET_ERRNO | ENOSYS]);
  const bytes = Buffer.alloc(program.length * 8);
  program.forEach(([code, jt, jf, k], index) => {
    bytes.writeUInt16LE(code, index * 8);
    bytes.writeUInt8(jt, index * 8 + 2);
    bytes.writeUInt8(jf, index * 8 + 3);
    bytes.writeUInt32LE(k, index * 8 + 4);
  });
  return bytes;
}
