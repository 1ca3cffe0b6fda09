import type { NetworkPolicy } from "@remote-task/protocol";
import { networkFromFlag } from "@remote-task/tool";
import { InvalidArgumentError } from "commander";

/**
 * `--network none|open|<host>[,<host>...]` as the protocol's policy (parsed as `remote-task mcp`
 * parses it), so a mistake is a usage error before anything is sent.
 */
export function networkPolicy(value: string): NetworkPolicy {
  try {
    return networkFromFlag(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

/** `--allow-private <host>[,<host>...]`: host patterns, checked like `--network`'s. */
export function hostList(value: string): string[] {
  const policy = networkPolicy(value);
  if (typeof policy === "string") {
    throw new InvalidArgumentError(`expected hosts separated by commas, not "${policy}".`);
  }
  return policy.allow;
}
