/**
 * `EgressGate`: the Worker entrypoint a container's outbound HTTP and HTTPS requests reach when its
 * call runs under a host allowlist or with secrets (task-container.ts registers it with the
 * platform's outbound interception). A request goes out, from the Worker, only when its host and
 * port match a pattern of the allowlist (the bridge's `hostMatches`, as on the local and docker
 * backends); an IP address that is not public (loopback, private, link-local such as
 * 169.254.169.254, ...) only when the allowlist names that address, which only a deployer's
 * ceiling can hold. Anything else is answered 403 with the reason. Under `open` with secrets the
 * gate has no allowlist to check.
 *
 * A call's secrets are applied by the bridge's own `applySecrets` and `hideSecrets` (as the local
 * and docker backends' egress proxy does): the placeholder in a request header becomes the value
 * only on the way to one of the secret's hosts (over plain HTTP only where a host pattern names
 * the port), where the deployer's header is set too; a
 * request carrying a placeholder to any other host is refused (403, the reason says which
 * secret); a value an upstream echoes in a response header is put back as the placeholder. The
 * URL and the body travel as written, and a redirect is never followed here (the command's client
 * sees it and makes its own request, which the gate checks again).
 *
 * What an allowlist means here: the platform intercepts HTTP (port 80) and HTTPS (port 443) only,
 * with the internet off nothing else leaves the container (no other port, no other protocol), and
 * the gate reaches what it lets through with the Worker's `fetch`, which reaches only the public
 * internet. HTTPS is decrypted by the platform with a certificate authority of the container's
 * own; the command is given its file in the usual variables ({@link egressEnv}).
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import {
  applySecrets,
  type CallSecret,
  hideSecrets,
  hostMatches,
  isPublicAddress,
  parseHostPattern,
  type SecretHeaders,
} from "@remote-task/bridge";

/** What the container's Durable Object gives the gate (in memory: props are never stored). */
export interface EgressProps {
  /** The call's allowlist; undefined under `open` (a call with secrets). */
  allow?: string[] | undefined;
  /** The call's secrets: name, placeholder, value, host patterns, header. */
  secrets?: CallSecret[] | undefined;
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

/** The host (no brackets, lower case) and port a request to `url` goes to. */
function destination(url: URL): { host: string; port: number } {
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase(),
    port: url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port),
  };
}

/** Why a request to `url` may not go out under `allow`, or `undefined` when it may. */
export function egressRefusal(url: URL, allow: readonly string[]): string | undefined {
  const { host, port } = destination(url);
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

/** Headers as the bridge's secret functions take them (a repeated name: several values). */
function headerRecord(headers: Headers): SecretHeaders {
  const out: SecretHeaders = {};
  for (const [name, value] of headers) {
    const had = out[name];
    out[name] = had === undefined ? value : [...(Array.isArray(had) ? had : [had]), value];
  }
  return out;
}

function toHeaders(record: SecretHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(record)) {
    for (const one of value === undefined ? [] : Array.isArray(value) ? value : [value]) {
      headers.append(name, one);
    }
  }
  return headers;
}

function refused(reason: string): Response {
  return new Response(`${reason}\n`, {
    status: 403,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

/** The gate (see the top of this file); its props carry the call's allowlist and secrets. */
export class EgressGate extends WorkerEntrypoint<Cloudflare.Env, EgressProps> {
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const { allow, secrets = [] } = this.ctx.props;
    if (allow !== undefined) {
      const refusal = egressRefusal(url, allow);
      if (refusal !== undefined) {
        return refused(
          `remote-task egress: request refused: ${refusal} (network policy: allow ${allow.join(", ")}).`,
        );
      }
    }
    if (secrets.length === 0) return this.upstream(request);
    const { host, port } = destination(url);
    const verdict = applySecrets(
      headerRecord(request.headers),
      { host, port, tls: url.protocol === "https:" },
      secrets,
    );
    if (!verdict.ok) return refused(verdict.reason);
    // Never followed here: a redirect to another host would carry the value there.
    const response = await this.upstream(
      new Request(request, { headers: toHeaders(verdict.headers), redirect: "manual" }),
    );
    const out = new Response(response.body, response);
    const hidden = toHeaders(hideSecrets(headerRecord(response.headers), secrets));
    for (const [name] of response.headers) out.headers.delete(name);
    for (const [name, value] of hidden) out.headers.append(name, value);
    return out;
  }

  /** Sends a request that may go out (tests answer it themselves). */
  protected upstream(request: Request): Promise<Response> {
    return fetch(request);
  }
}
