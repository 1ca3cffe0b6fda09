/**
 * What an egress boundary does with a call's secrets on one HTTP request, as pure functions of
 * plain header records (no Node or Workers type), so the Node egress proxy (host/egress.ts) and
 * the Worker's egress gate run the very same code. A request to a secret's host gets the value in
 * place of the placeholder wherever the placeholder appears in its headers (and the deployer's
 * header, when the secret has one): over HTTPS, or over plain HTTP only where a host pattern of
 * the secret names the port (a plain request carrying it to a bare host is refused); a request that carries a placeholder to any other host is
 * refused (fails closed), so the command learns at once rather than an upstream seeing a
 * placeholder. Only headers are rewritten: a placeholder in the URL or the body travels as
 * written (a body is never read), so it never becomes the value. An upstream echoing a value in
 * its response headers gets the placeholder back ({@link hideSecrets}).
 */
import { hostMatches } from "./network.js";
import type { CallSecret } from "./secrets.js";

/** HTTP headers by lower-case name: one value, several (a repeated header), or none. */
export type SecretHeaders = Record<string, string | string[] | undefined>;

/** The headers to send with the secrets put in, or why the request is refused. */
export type SecretsVerdict =
  | { ok: true; headers: SecretHeaders }
  | { ok: false; status: 403; reason: string };

function target(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

function replaceAll(value: string, placeholder: string, secret: string): string {
  return value.split(placeholder).join(secret);
}

/** Whether the secret's value may go to `host` port `port` (over TLS). */
export function secretAllowed(secret: CallSecret, host: string, port: number): boolean {
  return secret.patterns.some((pattern) => hostMatches(pattern, host, port));
}

/** Where a request goes, and whether it travels encrypted from the boundary on. */
export interface SecretDestination {
  host: string;
  port: number;
  /** HTTPS upstream; `false` for plain HTTP, which anyone on the way can read. */
  tls: boolean;
}

/**
 * Whether the secret's value may go to `to`: over TLS to any host and port of its patterns; over
 * plain HTTP only where a pattern names the port (`localhost:8080`, `api.internal:80`): a
 * deployer who writes a bare host (`api.github.com`) never has the value sent in clear text.
 */
function allowedOver(secret: CallSecret, to: SecretDestination): boolean {
  return secret.patterns.some(
    (pattern) => (to.tls || pattern.port !== undefined) && hostMatches(pattern, to.host, to.port),
  );
}

function refusal(name: string, secret: CallSecret, to: SecretDestination): string {
  const where = target(to.host, to.port);
  const hosts = secret.patterns
    .map((pattern) => target(pattern.host, pattern.port ?? 0).replace(/:0$/, ""))
    .join(", ");
  return secretAllowed(secret, to.host, to.port)
    ? `remote-task egress proxy: request to ${where} refused: its ${name} header carries the placeholder of secret ${secret.name}, which goes to ${where} over HTTPS only (this request is plain HTTP, readable on the way); use https://, or the deployer names the port in the secret's host to allow plain HTTP.`
    : `remote-task egress proxy: request to ${where} refused: its ${name} header carries the placeholder of secret ${secret.name}, which may go only to ${hosts}.`;
}

/**
 * The headers to send to `to` with the call's secrets put in, or the refusal when a header
 * carries the placeholder of a secret that may not go there (that host and port, that way).
 * `headers` is not changed.
 */
export function applySecrets(
  headers: SecretHeaders,
  to: SecretDestination,
  secrets: readonly CallSecret[],
): SecretsVerdict {
  if (secrets.length === 0) return { ok: true, headers };
  const out: SecretHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    let values = Array.isArray(value) ? [...value] : [value];
    for (const secret of secrets) {
      if (!values.some((text) => text.includes(secret.placeholder))) continue;
      if (!allowedOver(secret, to)) {
        return { ok: false, status: 403, reason: refusal(name, secret, to) };
      }
      values = values.map((text) => replaceAll(text, secret.placeholder, secret.value));
    }
    out[name] = Array.isArray(value) ? values : values[0];
  }
  for (const secret of secrets) {
    if (secret.header === undefined || !allowedOver(secret, to)) continue;
    out[secret.header.name] = replaceAll(secret.header.template, "{value}", secret.value);
  }
  return { ok: true, headers: out };
}

/** Response headers with any secret's value (an upstream echoing it) put back as its placeholder. */
export function hideSecrets(headers: SecretHeaders, secrets: readonly CallSecret[]): SecretHeaders {
  if (secrets.length === 0) return headers;
  const hide = (text: string) =>
    secrets.reduce((out, secret) => out.split(secret.value).join(secret.placeholder), text);
  const out: SecretHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name] = Array.isArray(value) ? value.map(hide) : hide(value);
  }
  return out;
}
