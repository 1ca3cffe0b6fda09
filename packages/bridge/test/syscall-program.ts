/**
 * A tiny static x86-64 Linux program that makes one system call and exits with its errno (0 when
 * it succeeded), as bytes, and the shell command that writes it to a file and runs it: the docker
 * tests' image has no compiler, Perl or Python, yet they must try `keyctl` or `io_setup` inside a
 * container. An argument is a number, or "buffer" for the address of 16 zeroed bytes.
 */

type Argument = number | "buffer";

function u64(value: number | bigint): number[] {
  const bytes = Buffer.alloc(8);
  bytes.writeBigInt64LE(BigInt(value));
  return [...bytes];
}

/** The program's bytes: an ELF header, one loadable segment, the code. */
function syscallProgram(nr: number, args: Argument[]): Buffer {
  // sub rsp, 16; mov qword [rsp], 0; mov qword [rsp+8], 0
  const code: number[] = [0x48, 0x83, 0xec, 0x10, 0x48, 0xc7, 0x04, 0x24, 0, 0, 0, 0];
  code.push(0x48, 0xc7, 0x44, 0x24, 0x08, 0, 0, 0, 0);
  code.push(0x48, 0xb8, ...u64(nr)); // mov rax, nr
  // rdi, rsi, rdx, r10: "mov reg, imm64" and "mov reg, rsp" encodings.
  const registers = [
    { imm: [0x48, 0xbf], rsp: [0x48, 0x89, 0xe7] },
    { imm: [0x48, 0xbe], rsp: [0x48, 0x89, 0xe6] },
    { imm: [0x48, 0xba], rsp: [0x48, 0x89, 0xe2] },
    { imm: [0x49, 0xba], rsp: [0x49, 0x89, 0xe2] },
  ];
  args.forEach((arg, index) => {
    const register = registers[index];
    if (register === undefined) throw new Error("at most four arguments");
    code.push(...(arg === "buffer" ? register.rsp : [...register.imm, ...u64(arg)]));
  });
  code.push(0x0f, 0x05); // syscall
  code.push(0x48, 0x85, 0xc0); // test rax, rax
  code.push(0x78, 0x04); // js fail
  code.push(0x31, 0xff); // xor edi, edi
  code.push(0xeb, 0x05); // jmp exit
  code.push(0x48, 0xf7, 0xd8); // fail: neg rax
  code.push(0x89, 0xc7); // mov edi, eax
  code.push(0xb8, 0x3c, 0, 0, 0); // exit: mov eax, 60 (exit)
  code.push(0x0f, 0x05); // syscall

  const base = 0x40_0000;
  const headers = 64 + 56;
  const size = headers + code.length;
  const elf = Buffer.alloc(size);
  elf.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1], 0);
  elf.writeUInt16LE(2, 16); // ET_EXEC
  elf.writeUInt16LE(0x3e, 18); // x86-64
  elf.writeUInt32LE(1, 20);
  elf.writeBigUInt64LE(BigInt(base + headers), 24); // entry
  elf.writeBigUInt64LE(64n, 32); // program headers' offset
  elf.writeUInt16LE(64, 52);
  elf.writeUInt16LE(56, 54);
  elf.writeUInt16LE(1, 56);
  elf.writeUInt32LE(1, 64); // PT_LOAD
  elf.writeUInt32LE(5, 68); // R+X
  elf.writeBigUInt64LE(BigInt(base), 80);
  elf.writeBigUInt64LE(BigInt(base), 88);
  elf.writeBigUInt64LE(BigInt(size), 96);
  elf.writeBigUInt64LE(BigInt(size), 104);
  elf.writeBigUInt64LE(0x1000n, 112);
  elf.set(code, headers);
  return elf;
}

/**
 * A bash command that writes the program to `path` (on an executable filesystem), runs it and
 * prints `label=<errno>`.
 */
export function runSyscall(label: string, nr: number, args: Argument[], path: string): string {
  const escaped = [...syscallProgram(nr, args)]
    .map((byte) => `\\x${byte.toString(16).padStart(2, "0")}`)
    .join("");
  return `printf '${escaped}' > ${path} && chmod +x ${path} && ${path}; echo ${label}=$?`;
}
