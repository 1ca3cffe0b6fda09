/**
 * Secrets on the command line, both sides. The deployer's: `serve --secret
 * NAME=SOURCE@HOSTS[|HEADER]`, one secret a call may ask for by name. SOURCE is `env:VAR` (a
 * variable of serve's own environment) or `file:/path` (read when a call asks); HOSTS are host
 * patterns separated by commas, as in `--network-ceiling`; HEADER (optional) is how the value is
 * presented besides the placeholder: `Authorization: Bearer {value}`, or a bare header name that
 * gets the value itself. The value never appears on the command line. The caller's: `--secrets
 * NAME[,NAME...]` of `run`, `run-many` and `mcp`, the names a call asks for, and the bridge's
 * refusal of a name it does not declare, in those terms.
 */
import type { SecretDeclaration } from "@remote-task/bridge";
import { secretNameSchema } from "@remote-task/protocol";
import { InvalidArgumentError } from "commander";
import { hostList } from "./network.js";

const FORM = "expected NAME=env:VAR@HOSTS or NAME=file:/path@HOSTS, optionally followed by |HEADER";

/** Parses one `--secret` and adds it to those before it (a name given twice is refused). */
export function secretFlag(
  text: string,
  previous: Record<string, SecretDeclaration> = {},
): Record<string, SecretDeclaration> {
  const match = /^([A-Za-z_][A-Za-z0-9_]*)=(env|file):(.+)@([^@|]+)(?:\|(.+))?$/.exec(text);
  if (match === null) throw new InvalidArgumentError(`${FORM}; got "${text}".`);
  const [, name = "", kind, source = "", hosts = "", header] = match;
  if (name in previous) throw new InvalidArgumentError(`secret ${name} is given twice.`);
  const declaration: SecretDeclaration = {
    from: kind === "env" ? { env: source } : { file: source },
    hosts: hostList(hosts),
    ...(header === undefined ? {} : { header }),
  };
  return { ...previous, [name]: declaration };
}

/**
 * The names of `--secrets NAME[,NAME...]` (given once or more), each as the bridge declares it;
 * a `TypeError` names one that cannot be a secret's name.
 */
export function secretNamesFromFlag(value: string, previous: readonly string[] = []): string[] {
  const names = value.split(",").map((name) => name.trim());
  const bad = names.filter((name) => !secretNameSchema.safeParse(name).success);
  if (bad.length > 0) {
    throw new TypeError(
      `expected secret names separated by commas, as the bridge declares them (remote-task health lists them; a name is [A-Za-z_][A-Za-z0-9_]*): ${bad.map((name) => JSON.stringify(name)).join(", ")} is none.`,
    );
  }
  return [...new Set([...previous, ...names])];
}

/** {@link secretNamesFromFlag} for commander: its `TypeError` as commander's usage error. */
export function secretNames(value: string, previous?: string[]): string[] {
  try {
    return secretNamesFromFlag(value, previous);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}
