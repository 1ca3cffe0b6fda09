/**
 * Secrets the deployer declares (by name: where the value comes from, the hosts it may go to,
 * how it is presented) and a call asks for by name. The command never holds a value: its env
 * gets a placeholder per secret (`rt_secret_<random>`, new for each call), and the egress proxy
 * (secret-headers.ts) puts the value into request headers to the secret's hosts only. A
 * value is read when a call that asks for it starts (so a rotated file or variable is picked
 * up), never from the call, by the host's {@link SecretReader}: this module runs in any runtime
 * (no Node built-in), so reading a file is the Node host's part (node.ts).
 */
import { BRIDGE_TEXTS } from "@remote-task/internal";
import {
  hostPatternSchema,
  type NetworkPolicy,
  type SecretReport,
  secretNameSchema,
} from "@remote-task/protocol";
import { type NetworkMode, type ParsedHostPattern, parseHostPattern } from "./network.js";
import { HttpError } from "./responses.js";

/** Where a secret's value comes from: an environment variable or a file of the bridge. */
export type SecretSource = { env: string } | { file: string };

/** One secret as the deployer declares it. */
export interface SecretDeclaration {
  /** Where the value is read (a file's value is its text without the final line break). */
  from: SecretSource;
  /** Host patterns (as in an allowlist) the value may be sent to. */
  hosts: readonly string[];
  /**
   * How the value is presented besides the placeholder (which is replaced wherever it appears in
   * a request header to the secret's hosts): `"Name: template"` sets header `Name` on every
   * request to those hosts, `{value}` in the template standing for the value (e.g.
   * `"Authorization: Bearer {value}"`); a bare `"Name"` sets it to the value itself.
   */
  header?: string | undefined;
}

/**
 * Reads a secret's value from its source; undefined (or a throw) when it cannot. The default
 * reads `{ env }` from `process.env` where the runtime has one and no file.
 */
export type SecretReader = (source: SecretSource) => Promise<string | undefined>;

/** The default reader: a variable of `process.env` where there is one. */
export const readSecretFromEnv: SecretReader = async (source) => {
  if (!("env" in source)) return undefined;
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process
    ?.env;
  return env?.[source.env];
};

/** The deployer's secrets, by name. */
export type SecretsOptions = Readonly<Record<string, SecretDeclaration>>;

/** A declaration, checked. */
export interface DeclaredSecret {
  name: string;
  from: SecretSource;
  hosts: readonly string[];
  patterns: readonly ParsedHostPattern[];
  header: { name: string; template: string } | undefined;
}

/** A secret as one call's sandbox gets it: the value stays in the bridge and its proxy. */
export interface CallSecret {
  name: string;
  /** What the command sees in its env under `name`. */
  placeholder: string;
  value: string;
  patterns: readonly ParsedHostPattern[];
  header: { name: string; template: string } | undefined;
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function checkedHeader(name: string, header: string | undefined): DeclaredSecret["header"] {
  if (header === undefined) return undefined;
  const colon = header.indexOf(":");
  const headerName = (colon < 0 ? header : header.slice(0, colon)).trim();
  const template = colon < 0 ? "{value}" : header.slice(colon + 1).trim();
  if (!HEADER_NAME.test(headerName) || !template.includes("{value}")) {
    throw new TypeError(
      `secrets.${name}.header (${JSON.stringify(header)}) must be a header name, or "Name: template" with {value} in the template.`,
    );
  }
  return { name: headerName.toLowerCase(), template };
}

/**
 * Checks the deployer's declarations; a clear TypeError names the first bad one, or a backend
 * that cannot inject secrets (no egress proxy, or no allowlists to widen).
 */
export function resolveSecrets(
  options: SecretsOptions | undefined,
  backend: {
    readonly name: string;
    readonly injectsSecrets?: boolean | undefined;
    readonly networkModes?: readonly NetworkMode[] | undefined;
  },
  /** The host gave its own reader (else only `{ env }` sources can be read). */
  ownReader = false,
): readonly DeclaredSecret[] {
  const entries = Object.entries(options ?? {});
  if (
    entries.length > 0 &&
    (backend.injectsSecrets !== true || !(backend.networkModes ?? []).includes("allow"))
  ) {
    throw new TypeError(
      `The ${backend.name} backend cannot inject secrets here (it needs an egress proxy: the local backend with bubblewrap, docker, or the Cloudflare Worker); leave out the secrets option.`,
    );
  }
  return entries.map(([name, declaration]) => {
    if (!secretNameSchema.safeParse(name).success) {
      throw new TypeError(
        `secrets: ${JSON.stringify(name)} is not a secret name ([A-Za-z_][A-Za-z0-9_]*).`,
      );
    }
    const from = declaration.from as Partial<{ env: unknown; file: unknown }>;
    if (
      !(typeof from?.env === "string" && from.env !== "") &&
      !(typeof from?.file === "string" && from.file !== "")
    ) {
      throw new TypeError(`secrets.${name}.from must be { env: "NAME" } or { file: "/path" }.`);
    }
    if ("file" in declaration.from && !ownReader) {
      throw new TypeError(
        `secrets.${name}.from.file needs a host that reads files (startEmbeddedBridge does); give createBridge a readSecret, or use { env }.`,
      );
    }
    if (!Array.isArray(declaration.hosts) || declaration.hosts.length === 0) {
      throw new TypeError(`secrets.${name}.hosts must list at least one host pattern.`);
    }
    for (const host of declaration.hosts) {
      const parsed = hostPatternSchema.safeParse(host);
      if (!parsed.success) {
        throw new TypeError(
          `secrets.${name}.hosts: ${JSON.stringify(host)} is not a host pattern: ${parsed.error.issues[0]?.message ?? "invalid"}.`,
        );
      }
    }
    return {
      name,
      from: declaration.from,
      hosts: [...declaration.hosts],
      patterns: declaration.hosts.map(parseHostPattern),
      header: checkedHeader(name, declaration.header),
    };
  });
}

/** What `/health` says of the secrets: names and hosts, never values or where they come from. */
export function secretsReport(declared: readonly DeclaredSecret[]): SecretReport[] {
  return declared.map(({ name, hosts }) => ({ name, hosts: [...hosts] }));
}

async function readValue(secret: DeclaredSecret, read: SecretReader): Promise<string> {
  let value: string | undefined;
  try {
    value = await read(secret.from);
  } catch {
    value = undefined;
  }
  if (value === undefined || value === "") {
    // Names the secret and the kind of source, never a value.
    throw new HttpError("not_configured", BRIDGE_TEXTS.secretUnavailable(secret.name));
  }
  return value;
}

/** `rt_secret_` and 32 random hex digits (Web Crypto: any runtime). */
function newPlaceholder(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `rt_secret_${[...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("")}`;
}

/**
 * The secrets a call asked for, each with a fresh placeholder and its value read now. Refuses
 * (403 `forbidden`) a name the deployer did not declare, listing those it did: never runs a call
 * with fewer secrets than it asked for.
 */
export async function callSecrets(
  declared: readonly DeclaredSecret[],
  requested: readonly string[] | undefined,
  read: SecretReader = readSecretFromEnv,
): Promise<CallSecret[]> {
  if (requested === undefined || requested.length === 0) return [];
  const unknown = requested.filter((name) => !declared.some((secret) => secret.name === name));
  if (unknown.length > 0) {
    throw new HttpError(
      "forbidden",
      BRIDGE_TEXTS.secretsUndeclared(
        unknown.join(", "),
        declared.length === 0 ? "none" : declared.map((secret) => secret.name).join(", "),
      ),
    );
  }
  const asked = declared.filter((secret) => requested.includes(secret.name));
  return Promise.all(
    asked.map(async (secret) => ({
      name: secret.name,
      placeholder: newPlaceholder(),
      value: await readValue(secret, read),
      patterns: secret.patterns,
      header: secret.header,
    })),
  );
}

/**
 * The policy of a call with secrets: its own policy (already within the ceiling) widened by the
 * secrets' hosts. `none` becomes an allowlist of those hosts, an allowlist gains them, `open`
 * stays `open`. The deployer granted those hosts by declaring the secrets, so they count
 * whatever the ceiling.
 */
export function withSecretHosts(
  policy: NetworkPolicy | undefined,
  declared: readonly DeclaredSecret[],
  requested: readonly string[],
): NetworkPolicy | undefined {
  if (requested.length === 0) return policy;
  const hosts = declared
    .filter((secret) => requested.includes(secret.name))
    .flatMap((secret) => secret.hosts);
  if (policy === "open") return policy;
  const allow = policy === undefined || policy === "none" ? [] : policy.allow;
  return { allow: [...new Set([...allow, ...hosts])] };
}
