/**
 * The egress decision of one sandbox's proxy, as pure functions (the proxy in egress.ts only wires
 * them to sockets and name resolution): may a connection to `host:port` go out, and to which of
 * the addresses the name resolved to. Addresses that are not public (loopback, private,
 * link-local such as 169.254.169.254, carrier-grade NAT, unique-local...) are refused unless the
 * deployer allowed them: an IP-literal pattern of an allowlist the deployer chose (its default,
 * or a call's allowlist within an allowlist ceiling, which names only the ceiling's literals; not
 * a caller's own allowlist under an `open` ceiling) or a pattern of `allowPrivate`. The same holds
 * for every address of the bridge's own host (each interface's, public ones too, any port): its
 * services are not the internet. An IPv6 address that embeds IPv4 addresses (IPv4-compatible,
 * mapped, NAT64, 6to4, Teredo) is judged by them as well. The bridge's own listening port is never
 * reachable.
 */
import type { NetworkPolicy } from "@remote-task/protocol";
import ipaddr from "ipaddr.js";
import {
  describeNetworkPolicy,
  embeddedIPv4,
  hostMatches,
  isPublicAddress,
  type ParsedHostPattern,
  parseHostPattern,
} from "../network.js";

/** An address and port the bridge listens on (never reachable from a sandbox). */
export interface Endpoint {
  host: string;
  port: number;
}

/** Everything a decision depends on besides the destination. */
export interface EgressRules {
  /** The call's policy: `open` or an allowlist. */
  policy: Exclude<NetworkPolicy, "none">;
  /** The allowlist's patterns, parsed (empty under `open`). */
  allowlist: readonly ParsedHostPattern[];
  /**
   * Whether the allowlist is the caller's own (chosen under an `open` ceiling): its IP literals
   * then have no exemption from the public-address and own-address rules.
   */
  callersAllowlist: boolean;
  /** Patterns the deployer allowed at non-public addresses. */
  allowPrivate: readonly ParsedHostPattern[];
  /** Where the bridge itself listens. */
  bridgeEndpoints: readonly Endpoint[];
  /** Every address of this machine's interfaces (any of them may be where the bridge listens). */
  hostAddresses: readonly string[];
}

export type EgressVerdict =
  | { ok: true; address: string }
  | { ok: false; status: 400 | 403 | 502 | 503; reason: string };

/** The rules of a call's proxy, its allowlist parsed once. */
export function egressRules(
  policy: Exclude<NetworkPolicy, "none">,
  allowPrivate: readonly ParsedHostPattern[],
  bridgeEndpoints: readonly Endpoint[],
  hostAddresses: readonly string[],
  callersAllowlist = false,
): EgressRules {
  const allowlist = policy === "open" ? [] : policy.allow.map(parseHostPattern);
  return { policy, allowlist, callersAllowlist, allowPrivate, bridgeEndpoints, hostAddresses };
}

/** ipaddr.js's range names, as a message says them. */
const RANGE_WORDS: Record<string, string> = {
  linkLocal: "link-local",
  carrierGradeNat: "carrier-grade NAT",
  uniqueLocal: "unique-local",
  ipv4Mapped: "IPv4-mapped",
  rfc6145: "IPv4-translated",
  rfc6052: "IPv4-embedded",
  "6to4": "6to4",
  teredo: "Teredo",
};

function rangeOf(address: string): string {
  const inner = embeddedIPv4(address).find((form) => ipaddr.parse(form).range() !== "unicast");
  if (inner !== undefined) return rangeOf(inner);
  const range = ipaddr.process(address).range();
  return RANGE_WORDS[range] ?? range;
}

function canonical(address: string): string {
  return ipaddr.process(address).toString();
}

function target(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

function refuse(host: string, port: number, rules: EgressRules, reason: string): EgressVerdict {
  return {
    ok: false,
    status: 403,
    reason: `remote-task egress proxy: connection to ${target(host, port)} refused: ${reason} (network policy: ${describeNetworkPolicy(rules.policy)}).`,
  };
}

/** The address itself and the IPv4 addresses it embeds, canonical. */
function forms(address: string): string[] {
  return [canonical(address), ...embeddedIPv4(address)];
}

/** True for this machine's own addresses (or an address embedding one). */
function isOwnAddress(address: string, rules: EgressRules): boolean {
  return forms(address).some((form) => {
    const range = ipaddr.parse(form).range();
    if (range === "loopback" || range === "unspecified") return true;
    return rules.hostAddresses.some((own) => ipaddr.isValid(own) && canonical(own) === form);
  });
}

function isBridge(address: string, port: number, rules: EgressRules): boolean {
  return rules.bridgeEndpoints.some(
    (endpoint) =>
      endpoint.port === port &&
      (isOwnAddress(address, rules) ||
        (ipaddr.isValid(endpoint.host) && forms(address).includes(canonical(endpoint.host)))),
  );
}

/**
 * The checks before any name is resolved: a well-formed destination the call's allowlist names.
 * Undefined when the destination may be resolved.
 */
export function screenDestination(
  host: string,
  port: number,
  rules: EgressRules,
): EgressVerdict | undefined {
  if (!Number.isInteger(port) || port < 1 || port > 65535 || host === "") {
    return {
      ok: false,
      status: 400,
      reason: `remote-task egress proxy: bad destination ${target(host, port)}.`,
    };
  }
  if (
    rules.policy !== "open" &&
    !rules.allowlist.some((pattern) => hostMatches(pattern, host, port))
  ) {
    return refuse(host, port, rules, "not in the call's allowlist");
  }
  return undefined;
}

/** The answer when `host` could not be resolved (`why`: the resolver's code or message). */
export function unresolved(host: string, why: string): EgressVerdict {
  return {
    ok: false,
    status: 502,
    reason: `remote-task egress proxy: cannot resolve ${host}: ${why}.`,
  };
}

/** The answer when a sandbox has as many names resolving as it may. */
export function tooManyLookups(host: string, maxPending: number): EgressVerdict {
  return {
    ok: false,
    status: 503,
    reason: `remote-task egress proxy: cannot resolve ${host} now: this sandbox already has ${maxPending} names resolving; try again when they are done.`,
  };
}

/**
 * The first of `addresses` (what `host` resolved to, or `host` itself when it is an address) the
 * rules let the sandbox reach, or the refusal naming why the first one was refused.
 */
export function chooseAddress(
  host: string,
  port: number,
  addresses: readonly string[],
  rules: EgressRules,
): EgressVerdict {
  const explicitlyAllowed = (address: string) =>
    (!rules.callersAllowlist &&
      rules.allowlist.some((pattern) => pattern.literal && hostMatches(pattern, address, port))) ||
    rules.allowPrivate.some(
      (pattern) => hostMatches(pattern, host, port) || hostMatches(pattern, address, port),
    );
  let reason = "";
  for (const address of addresses) {
    if (isBridge(address, port, rules)) {
      reason ||= `${address} port ${port} is the bridge itself`;
      continue;
    }
    if (explicitlyAllowed(address)) return { ok: true, address };
    if (!isPublicAddress(address)) {
      reason ||= `${address} is not public (${rangeOf(address)}) and the deployer has not allowed it`;
    } else if (isOwnAddress(address, rules)) {
      reason ||= `${address} is an address of the bridge's own host and the deployer has not allowed it`;
    } else return { ok: true, address };
  }
  return refuse(host, port, rules, reason || "no address");
}
