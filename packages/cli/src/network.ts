import { hostPatternSchema, type NetworkPolicy } from "@remote-task/protocol";
import { InvalidArgumentError } from "commander";

/**
 * `--network none|open|<host>[,<host>...]` as the protocol's policy. Each host is checked with the
 * protocol's own pattern, so a mistake is a usage error before anything is sent.
 */
export function networkPolicy(value: string): NetworkPolicy {
  if (value === "none" || value === "open") return value;
  const hosts = value.split(",").map((host) => host.trim());
  const bad = hosts.filter((host) => !hostPatternSchema.safeParse(host).success);
  if (bad.length > 0) {
    throw new InvalidArgumentError(
      `expected none, open, or hosts separated by commas (${bad.map((host) => JSON.stringify(host)).join(", ")} is not a host: a host is name, *.name, an IPv4 address or [IPv6], optionally with :port, in lower case).`,
    );
  }
  return { allow: hosts };
}
