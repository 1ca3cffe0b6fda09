import { expect, it } from "vitest";
import lockfile from "../../../package-lock.json?raw";
import dockerfile from "../Dockerfile?raw";
import packageJson from "../package.json?raw";

it("pins @cloudflare/sandbox exactly, and the Dockerfile's image to the same version", () => {
  const pinned = JSON.parse(packageJson).dependencies["@cloudflare/sandbox"] as string;
  expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
  const installed = JSON.parse(lockfile).packages["node_modules/@cloudflare/sandbox"]?.version;
  expect(installed).toBe(pinned);
  const images = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((match) => match[1]);
  expect(images).toEqual([`docker.io/cloudflare/sandbox:${pinned}`]);
});
