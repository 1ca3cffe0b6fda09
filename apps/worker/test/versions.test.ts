import { expect, it } from "vitest";
import lockfile from "../../../package-lock.json?raw";
import dockerfile from "../Dockerfile?raw";
import packageJson from "../package.json?raw";
import wrangler from "../wrangler.jsonc?raw";

it("pins @cloudflare/sandbox exactly, and the Dockerfile's image to the same version", () => {
  const pinned = JSON.parse(packageJson).dependencies["@cloudflare/sandbox"] as string;
  expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
  const installed = JSON.parse(lockfile).packages["node_modules/@cloudflare/sandbox"]?.version;
  expect(installed).toBe(pinned);
  const images = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((match) => match[1]);
  expect(images).toEqual([`docker.io/cloudflare/sandbox:${pinned}`]);
});

it("repeats the containers' max_instances as MAX_INSTANCES, in its one environment", () => {
  const maxInstances = [...wrangler.matchAll(/"max_instances":\s*(\d+)/g)].map((m) => m[1]);
  const variables = [...wrangler.matchAll(/"MAX_INSTANCES":\s*"(\d+)"/g)].map((m) => m[1]);
  expect(maxInstances).toHaveLength(1);
  expect(variables).toEqual([maxInstances[0]]);
  // One environment: a second one makes every `wrangler deploy` warn (see test/harness/build.test.ts).
  expect(wrangler).not.toMatch(/"env"\s*:/);
});
