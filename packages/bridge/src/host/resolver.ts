/**
 * Name resolution for one sandbox's egress proxy, off libuv's shared thread pool. `dns.lookup`
 * (getaddrinfo) runs on that pool's four threads, which every tenant's lookups and the bridge's
 * own file work share: a sandbox asking for names whose DNS never answers could stall them all.
 * Here names come from the hosts file first (read synchronously: a few hundred bytes), then from
 * DNS through c-ares (`Resolver`: its own sockets, no thread), A and AAAA side by side, each query
 * bounded in time, and at most `maxPending` names resolving at once per sandbox.
 */
import { Resolver } from "node:dns/promises";
import { readFileSync, statSync } from "node:fs";
import { isIP } from "node:net";
import { brandClass } from "@remote-task/internal";

export interface NameResolverOptions {
  /** DNS servers (default: the system's, from /etc/resolv.conf). */
  servers?: readonly string[] | undefined;
  /** Time one DNS query may take before its one retry, in ms (default 2000). */
  timeoutMs?: number | undefined;
  /** Names resolving at once; more are refused at once (default 8). */
  maxPending?: number | undefined;
  /** The hosts file, consulted before DNS (default `/etc/hosts`). */
  hostsFile?: string | undefined;
}

const DEFAULT_LOOKUP_TIMEOUT_MS = 2_000;
const DEFAULT_MAX_PENDING_LOOKUPS = 8;

/** Thrown when a sandbox already has `maxPending` names resolving. */
export class TooManyLookupsError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.TooManyLookupsError");
  override readonly name = "TooManyLookupsError";

  constructor(readonly maxPending: number) {
    super(`${maxPending} names are already resolving for this sandbox`);
  }
}

export interface NameResolver {
  /** The addresses of `name` (hosts file first, then DNS A and AAAA). */
  resolve(name: string): Promise<string[]>;
  /** Names resolving now. */
  readonly pending: number;
  /** Ends every query in flight (they fail with ECANCELLED). */
  cancel(): void;
}

/** Name (lower case) to addresses, from a hosts file's text. */
export function parseHosts(text: string): Map<string, string[]> {
  const names = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const [address, ...aliases] = line.replace(/#.*/, "").trim().split(/\s+/);
    if (address === undefined || isIP(address.replace(/%.*/, "")) === 0) continue;
    for (const alias of aliases) {
      const name = alias.toLowerCase();
      const list = names.get(name) ?? [];
      if (!list.includes(address)) list.push(address);
      names.set(name, list);
    }
  }
  return names;
}

let hostsCache: { file: string; stamp: string; names: Map<string, string[]> } | undefined;

function hostsEntries(file: string): Map<string, string[]> {
  let stamp: string;
  try {
    const stat = statSync(file);
    stamp = `${stat.mtimeMs}:${stat.size}:${stat.ino}`;
  } catch {
    return new Map();
  }
  if (hostsCache?.file !== file || hostsCache.stamp !== stamp) {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {}
    hostsCache = { file, stamp, names: parseHosts(text) };
  }
  return hostsCache.names;
}

/**
 * A name resolver for the egress proxy: the hosts file first, then DNS through c-ares (off the
 * thread pool), each lookup bounded in time and the lookups in flight capped.
 */
export function createNameResolver(options: NameResolverOptions = {}): NameResolver {
  const resolver = new Resolver({
    timeout: options.timeoutMs ?? DEFAULT_LOOKUP_TIMEOUT_MS,
    tries: 2,
  });
  if (options.servers !== undefined) resolver.setServers([...options.servers]);
  const maxPending = options.maxPending ?? DEFAULT_MAX_PENDING_LOOKUPS;
  const hostsFile = options.hostsFile ?? "/etc/hosts";
  let pending = 0;

  async function fromDns(name: string): Promise<string[]> {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
    const addresses = [
      ...(v4.status === "fulfilled" ? v4.value : []),
      ...(v6.status === "fulfilled" ? v6.value : []),
    ];
    if (addresses.length > 0) return addresses;
    throw v4.status === "rejected" ? v4.reason : new Error("ENODATA");
  }

  return {
    async resolve(name) {
      const known = hostsEntries(hostsFile).get(name.toLowerCase());
      if (known !== undefined) return known;
      if (pending >= maxPending) {
        throw new TooManyLookupsError(maxPending);
      }
      pending++;
      try {
        return await fromDns(name);
      } finally {
        pending--;
      }
    },
    get pending() {
      return pending;
    },
    cancel: () => resolver.cancel(),
  };
}
