/**
 * The `--network` and `--allow-private` values of every command, `mcp` included: a mistake is a
 * usage error before anything is sent.
 */
import { hostPatternSchema, type NetworkPolicy } from "@remote-task/protocol";
import { InvalidArgumentError } from "commander";

/**
 * `--network none|open|<host>[,<host>...]` as the protocol's policy; a `TypeError` saying what is
 * accepted otherwise. A bare word (`internet`) is a mistyped mode far more often than a host, so
 * a host needs a dot, a port or brackets.
 */
export function networkFromFlag(value: string): NetworkPolicy {
  if (value === "none" || value === "open") return value;
  const hosts = value.split(",").map((host) => host.trim());
  const bad = hosts.filter(
    (host) => !(hostPatternSchema.safeParse(host).success && /[.:[]/.test(host)),
  );
  if (bad.length > 0) {
    throw new TypeError(
      `expected none, open, or hosts separated by commas: ${bad.map((host) => JSON.stringify(host)).join(", ")} is neither a mode nor a host (a host is name, *.name, an IPv4 address or [IPv6], with a dot or a :port, e.g. example.com, *.example.com, 10.0.0.7, [::1], localhost:8080, in lower case).`,
    );
  }
  return { allow: hosts };
}

/**
 * {@link networkFromFlag} for commander: its `TypeError` as commander's usage error.
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
