/**
 * The README's `curl` examples, read from the README itself: each request body is one the Worker
 * accepts (the protocol's schema), and each shell variable they use is set earlier in the README.
 */
import { readFileSync } from "node:fs";
import { execRequestSchema } from "@remote-task/protocol";
import { expect, it } from "vitest";

const README = readFileSync(new URL("../../README.md", import.meta.url), "utf8");

/** The `-d` bodies of the README's curl calls to `/exec`, as a shell would pass them. */
function execBodies(): string[] {
  const bodies: string[] = [];
  for (const match of README.matchAll(/-d (?:'([^']*)'|"((?:[^"\\]|\\.)*)") \$URL\/exec/g)) {
    const body = match[1] ?? (match[2] as string).replace(/\\(["\\$`])/g, "$1");
    // A command substitution inside a double-quoted body stands for base64 text.
    bodies.push(body.replace(/\$\([^)]*\)/g, "aGk="));
  }
  return bodies;
}

it("sends only request bodies the Worker accepts, each with a sandbox id", () => {
  const bodies = execBodies();
  expect(bodies.length).toBeGreaterThanOrEqual(5);
  for (const body of bodies) {
    const parsed = execRequestSchema.safeParse(JSON.parse(body));
    expect(parsed.success, `${body}: ${parsed.error?.message}`).toBe(true);
  }
});

it("sets $TOKEN and $URL before any command uses them", () => {
  for (const variable of ["TOKEN", "URL"]) {
    const set = README.search(new RegExp(`^${variable}=`, "m"));
    const used = README.indexOf(`$${variable}`);
    expect(set, variable).toBeGreaterThanOrEqual(0);
    expect(set, variable).toBeLessThan(used);
  }
});
