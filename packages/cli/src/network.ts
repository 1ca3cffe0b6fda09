import { hostPatternSchema, type NetworkPolicy } from "@remote-task/protocol";
import { InvalidArgumentError } from "commander";

/**
 * `--network none|open|<host>[,<host>...]` as the protocol's policy. Each host is checked with the
 * protocol's own pattern, so a mistake is a usage error before anything is sent.
 */
export function networkPolicy(value: string): NetworkPolicy {
  if (value === "none" || value === "open") return value;
  return { allow: hosts(value, "none, open, or hosts separated by commas") };
}

/** `--allow-private <host>[,<host>...]`: host patterns, checked like `--network`'s. */
export function hostList(value: string): string[] {
  return hosts(value, "hosts separated by commas");
}

function hosts(value: string, expected: string): string[] {
  const list = value.split(",").map((host) => host.trim());
  const bad = list.filter((host) => !hostPatternSchema.safeParse(host).success);
  if (bad.length > 0) {
    throw new InvalidArgumentError(
      `expected ${expected} (${bad.map((host) => JSON.stringify(host)).join(", ")} is not a host: a host is name, *.name, an IPv4 address or [IPv6], optionally with :port, in lower case).`,
    );
  }
  return list;
}
