import { EXIT } from "./exit-codes.js";
import { isOutputClosed, watchOutputClosed } from "./interrupt.js";
import { main } from "./program.js";

watchOutputClosed();
main(process.argv).then(
  (code) => {
    process.exitCode = isOutputClosed() ? EXIT.outputClosed : code;
  },
  (error: unknown) => {
    process.stderr.write(`remote-task: unexpected error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
