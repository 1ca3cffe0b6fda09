/**
 * `EgressGate`: the Worker entrypoint a container's outbound HTTP and HTTPS requests reach when its
 * call runs under a host allowlist (task-container.ts registers it with the platform's outbound
 * interception; the container's internet is off). A request goes out, from the Worker, only when
 * its host and port match a pattern of the allowlist (the bridge's `hostMatches`, as on the local
 * and docker backends); an IP address that is not public (loopback, private, link-local such as
 * 169.254.169.254, ...) only when the allowlist names that address, which only a deployer's
 * ceiling can hold. Anything else is answered 403 with the reason.
 *
 * What an allowlist means here: the platform intercepts HTTP (port 80) and HTTPS (port 443) only,
 * with the internet off nothing else leaves the container (no other port, no other protocol), and
 * the gate reaches what it lets through with the Worker's `fetch`, which reaches only the public
 * internet. HTTPS is decrypted by the platform with a certificate authority of the container's
 * own; the command is given its file in the usual variables ({@link egressEnv}).
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import { hostMatches, isPublicAddress, parseHostPattern } from "@remote-task/bridge";

/** What the container's Durable Object gives the gate: the call's allowlist. */
export interface EgressProps {
  allow: string[];
}

/** Where the platform puts the certificate authority of a container's intercepted HTTPS. */
export const INTERCEPT_CA_FILE = "/etc/cloudflare/certs/cloudflare-containers-ca.crt";

/**
 * The variables that make common clients (OpenSSL, curl, git, Python requests, Node) trust the
 * container's interception CA; a call's own `env` wins over them.
 */
export function egressEnv(): Record<string, string> {
  return {
    SSL_CERT_FILE: INTERCEPT_CA_FILE,
    CURL_CA_BUNDLE: INTERCEPT_CA_FILE,
    GIT_SSL_CAINFO: INTERCEPT_CA_FILE,
    REQUESTS_CA_BUNDLE: INTERCEPT_CA_FILE,
    NODE_EXTRA_CA_CERTS: INTERCEPT_CA_FILE,
  };
}

/** Why a request to `url` may not go out under `allow`, or `undefined` when it may. */
export function egressRefusal(url: URL, allow: readonly string[]): string | undefined {
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  const port = url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port);
  const patterns = allow.map(parseHostPattern);
  const listed = patterns.filter((pattern) => hostMatches(pattern, host, port));
  const where = `${url.protocol}//${url.host}`;
  if (listed.length === 0) return `${where} is not in the call's allowlist`;
  if (isAddress(host) && !isPublicAddress(host) && !listed.some((pattern) => pattern.literal)) {
    return `${where} is not a public address and the allowlist does not name it`;
  }
  return undefined;
}

function isAddress(host: string): boolean {
  return /^\d+\.\d+\.\d+\.\d+$/.test(host) || host.includes(":");
}

/** The gate (see the top of this file); its props carry the call's allowlist. */
export class EgressGate extends WorkerEntrypoint<Cloudflare.Env, EgressProps> {
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const refusal = egressRefusal(url, this.ctx.props.allow);
    if (refusal !== undefined) {
      return new Response(
        `remote-task egress: request refused: ${refusal} (network policy: allow ${this.ctx.props.allow.join(", ")}).\n`,
        { status: 403, headers: { "content-type": "text/plain; charset=utf-8" } },
      );
    }
    return fetch(request);
  }
}
