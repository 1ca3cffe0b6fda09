/**
 * `serve --secret NAME=SOURCE@HOSTS[|HEADER]`: one secret a call may ask for by name. SOURCE is
 * `env:VAR` (a variable of serve's own environment) or `file:/path` (read when a call asks); HOSTS
 * are host patterns separated by commas, as in `--network-ceiling`; HEADER (optional) is how the
 * value is presented besides the placeholder: `Authorization: Bearer {value}`, or a bare header
 * name that gets the value itself. The value never appears on the command line.
 */
import type { SecretDeclaration } from "@remote-task/bridge";
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
