import { main } from "./program.js";

main(process.argv).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`remote-task: unexpected error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
