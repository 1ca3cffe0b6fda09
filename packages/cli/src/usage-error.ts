/**
 * A flag value refused where it is used rather than where it is parsed (e.g. `--network` with
 * isolation none, which the embedded bridge refuses as it starts): exit 2, as in `serve`.
 */
import { brandClass } from "@remote-task/internal";

export class UsageError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.UsageError");
  override readonly name = "UsageError";
}
