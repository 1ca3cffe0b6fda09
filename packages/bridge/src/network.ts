import { BRIDGE_TEXTS } from "@remote-task/internal";
import {
  DEFAULT_NETWORK_POLICY,
  type NetworkPolicy,
  type NetworkReport,
  networkPolicySchema,
} from "@remote-task/protocol";
import ipaddr from "ipaddr.js";
import { HttpError } from "./responses.js";

/** The kinds of network policy, ordered: `none` < `allow` < `open`. */
export type NetworkMode = "none" | "allow" | "open";

/** What a deployer sets: the policy of a call that names none, and the most a call may ask. */
export interface NetworkOptions {
  /** Policy of a call that names none (default `none`). */
  default?: NetworkPolicy | undefined;
  /** The most a call may ask for (default: the default policy). */
  ceiling?: NetworkPolicy | undefined;
}

function networkMode(policy: NetworkPolicy): NetworkMode {
  return typeof policy === "string" ? policy : "allow";
}

/** A host pattern taken apart: `host` without brackets, `port` undefined for any port. */
export interface ParsedHostPattern {
  /** Lower-case name, `*.`-prefixed name, IPv4 address or IPv6 address (no brackets). */
  host: string;
  port: number | undefined;
  /** The host is an IP address (not a name). */
  literal: boolean;
}

/**
 * Takes a host pattern apart (`name`, `*.name`, IPv4, `[IPv6]`, each with an optional `:port`);
 * the pattern is one the protocol's `hostPatternSchema` accepted.
 */
export function parseHostPattern(pattern: string): ParsedHostPattern {
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(pattern);
  if (bracketed !== null) {
    return {
      host: bracketed[1] as string,
      port: bracketed[2] === undefined ? undefined : Number(bracketed[2]),
      literal: true,
    };
  }
  const [host = "", port] = pattern.split(":");
  return {
    host,
    port: port === undefined ? undefined : Number(port),
    literal: ipaddr.IPv4.isValidFourPartDecimal(host),
  };
}

const v4 = (bytes: number[]) => new ipaddr.IPv4(bytes).toString();

/**
 * The IPv4 addresses an IPv6 address carries, in every form that embeds one: IPv4-compatible
 * (`::a.b.c.d`, ::/96 but `::` and `::1`), IPv4-mapped (::ffff:0:0/96), IPv4-translated
 * (::ffff:0:0:0/96), NAT64 (64:ff9b::/96 and the local-use 64:ff9b:1::/48), 6to4 (2002::/16) and
 * Teredo (2001::/32: its server's and, inverted, its client's). Empty for any other address.
 */
export function embeddedIPv4(address: string): string[] {
  if (!ipaddr.IPv6.isValid(address)) return [];
  const b = ipaddr.IPv6.parse(address).toByteArray();
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const last = b.slice(12, 16);
  if (zero(0, 12) && !(zero(12, 15) && (b[15] ?? 0) <= 1)) return [v4(last)];
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return [v4(last)];
  if (zero(0, 8) && b[8] === 0xff && b[9] === 0xff && zero(10, 12)) return [v4(last)];
  const prefix = b
    .slice(0, 4)
    .map((x) => x.toString(16).padStart(2, "0"))
    .join("");
  if (prefix === "0064ff9b") {
    if (zero(4, 12)) return [v4(last)];
    if (b[4] === 0 && b[5] === 1) return [v4([b[6] ?? 0, b[7] ?? 0, b[9] ?? 0, b[10] ?? 0])];
  }
  if (b[0] === 0x20 && b[1] === 0x02) return [v4(b.slice(2, 6))];
  if (prefix === "20010000") return [v4(b.slice(4, 8)), v4(last.map((x) => x ^ 0xff))];
  return [];
}

/**
 * Whether an IP address is on the public internet (global unicast). Loopback, private,
 * link-local (169.254.169.254 among them), carrier-grade NAT, unique-local, multicast and
 * reserved addresses are not; an IPv6 address that embeds IPv4 addresses ({@link embeddedIPv4})
 * is public only when each of them is.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const embedded = embeddedIPv4(address);
  if (embedded.length > 0)
    return embedded.every((inner) => ipaddr.parse(inner).range() === "unicast");
  return ipaddr.parse(address).range() === "unicast";
}

function sameAddress(a: string, b: string): boolean {
  try {
    return ipaddr.parse(a).toNormalizedString() === ipaddr.parse(b).toNormalizedString();
  } catch {
    return false;
  }
}

/** Whether `host` (a name or an IP address) and `port` match one host pattern. */
export function hostMatches(pattern: ParsedHostPattern, host: string, port: number): boolean {
  if (pattern.port !== undefined && pattern.port !== port) return false;
  const name = host
    .toLowerCase()
    .replace(/^\[|\]$/g, "")
    .replace(/\.$/, "");
  if (pattern.literal) return sameAddress(pattern.host, name);
  if (pattern.host.startsWith("*.")) return name.endsWith(pattern.host.slice(1));
  return name === pattern.host;
}

/** Whether every host and port `inner` matches is matched by `outer`. */
function patternCovers(outer: ParsedHostPattern, inner: ParsedHostPattern): boolean {
  if (outer.port !== undefined && outer.port !== inner.port) return false;
  if (outer.literal || inner.literal) {
    return outer.literal && inner.literal && sameAddress(outer.host, inner.host);
  }
  if (!outer.host.startsWith("*.")) return outer.host === inner.host;
  return inner.host.endsWith(outer.host.slice(1));
}

/** A pattern naming an address that is not public: only a deployer may list it. */
function namesPrivateAddress(pattern: ParsedHostPattern): boolean {
  return pattern.literal && !isPublicAddress(pattern.host);
}

/**
 * Whether `ceiling` allows `requested`: `none` always; an allowlist when each of its patterns is
 * covered by one of the ceiling's (or the ceiling is `open` and the pattern names no private
 * address: those only a deployer may list, by name in the ceiling); `open` only under `open`.
 */
export function networkAllows(ceiling: NetworkPolicy, requested: NetworkPolicy): boolean {
  if (requested === "none") return true;
  if (requested === "open") return ceiling === "open";
  if (ceiling === "none") return false;
  return requested.allow.every((text) => {
    const pattern = parseHostPattern(text);
    if (ceiling === "open") return !namesPrivateAddress(pattern);
    return ceiling.allow.some((outer) => patternCovers(parseHostPattern(outer), pattern));
  });
}

/** What a bridge enforces: the resolved default and ceiling, and the modes its backend has. */
export interface NetworkSettings extends NetworkReport {
  modes: readonly NetworkMode[];
}

/** A policy as messages say it: `none`, `open` or `allow a, b`. */
export function describeNetworkPolicy(policy: NetworkPolicy): string {
  return typeof policy === "string" ? policy : `allow ${policy.allow.join(", ")}`;
}

function checkedPolicy(value: unknown, name: string): NetworkPolicy {
  const parsed = networkPolicySchema.safeParse(value);
  if (!parsed.success) {
    throw new TypeError(
      `network.${name} must be "none", "open" or { allow: [host patterns] }: ${parsed.error.issues[0]?.message ?? "invalid"}.`,
    );
  }
  return parsed.data;
}

/**
 * The network settings of a bridge over a backend that enforces `modes` (none: it controls no
 * network access, and the bridge takes no `network` option). Throws a `TypeError` for a policy
 * the backend cannot enforce or a default wider than the ceiling.
 */
export function resolveNetwork(
  options: NetworkOptions | undefined,
  modes: readonly NetworkMode[] | undefined,
  backendName: string,
): NetworkSettings | undefined {
  if (modes === undefined || modes.length === 0) {
    if (options?.default !== undefined || options?.ceiling !== undefined) {
      throw new TypeError(
        `The ${backendName} backend does not control network access here; leave out the network option.`,
      );
    }
    return undefined;
  }
  const defaultPolicy = checkedPolicy(options?.default ?? DEFAULT_NETWORK_POLICY, "default");
  const ceiling = checkedPolicy(options?.ceiling ?? defaultPolicy, "ceiling");
  for (const [name, policy] of [
    ["default", defaultPolicy],
    ["ceiling", ceiling],
  ] as const) {
    if (!modes.includes(networkMode(policy))) {
      throw new TypeError(
        `network.${name} is ${networkMode(policy)}, which the ${backendName} backend cannot enforce (it enforces ${modes.join(", ")}).`,
      );
    }
  }
  if (!networkAllows(ceiling, defaultPolicy)) {
    throw new TypeError(
      `network.default (${describeNetworkPolicy(defaultPolicy)}) is wider than network.ceiling (${describeNetworkPolicy(ceiling)}).`,
    );
  }
  return { default: defaultPolicy, ceiling, modes };
}

/**
 * The policy a call runs with: its own when it names one within the ceiling, else the default.
 * Refuses (403 `forbidden`) a policy wider than the ceiling or one the backend cannot enforce;
 * never runs a call with less than it asked for.
 */
export function callNetwork(
  settings: NetworkSettings | undefined,
  requested: NetworkPolicy | undefined,
): NetworkPolicy | undefined {
  if (settings === undefined) {
    if (requested === undefined) return undefined;
    throw new HttpError("forbidden", BRIDGE_TEXTS.networkUncontrolled);
  }
  if (requested === undefined) return settings.default;
  if (!networkAllows(settings.ceiling, requested)) {
    throw new HttpError(
      "forbidden",
      BRIDGE_TEXTS.networkBeyondCeiling(
        describeNetworkPolicy(requested),
        describeNetworkPolicy(settings.ceiling),
      ),
    );
  }
  if (!settings.modes.includes(networkMode(requested))) {
    throw new HttpError(
      "forbidden",
      BRIDGE_TEXTS.networkModeUnsupported(networkMode(requested), settings.modes.join(", ")),
    );
  }
  return requested;
}
