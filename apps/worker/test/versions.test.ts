import { expect, it } from "vitest";
import dockerfile from "../Dockerfile?raw";
import packageJson from "../package.json?raw";
import wrangler from "../wrangler.jsonc?raw";

it("depends on no Cloudflare SDK and builds its image from a plain base, with no Cloudflare image", () => {
  const manifest = JSON.parse(packageJson) as Record<string, Record<string, string> | undefined>;
  const names = [
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.devDependencies ?? {}),
  ];
  expect(names).not.toContain("@cloudflare/sandbox");
  expect(names).not.toContain("@cloudflare/containers");
  const images = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((match) => match[1]);
  expect(images).toHaveLength(1);
  expect(images[0]).not.toMatch(/cloudflare/);
});

it("binds TaskContainer to the containers and replaces the 0.x Sandbox class in a migration", () => {
  expect(wrangler).toMatch(/"class_name":\s*"TaskContainer",\s*"image":\s*"\.\/Dockerfile"/);
  expect(wrangler).toMatch(
    /"deleted_classes":\s*\["Sandbox"\],\s*"new_sqlite_classes":\s*\["TaskContainer"\]/,
  );
});

it("repeats the containers' max_instances as MAX_INSTANCES, in its one environment", () => {
  const maxInstances = [...wrangler.matchAll(/"max_instances":\s*(\d+)/g)].map((m) => m[1]);
  const variables = [...wrangler.matchAll(/"MAX_INSTANCES":\s*"(\d+)"/g)].map((m) => m[1]);
  expect(maxInstances).toHaveLength(1);
  expect(variables).toEqual([maxInstances[0]]);
  // One environment: a second one makes every `wrangler deploy` warn (see test/harness/build.test.ts).
  expect(wrangler).not.toMatch(/"env"\s*:/);
});
