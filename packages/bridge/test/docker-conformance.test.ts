import { afterAll, it } from "vitest";
import { createDockerBackend, type DockerBackend } from "../src/docker/index.js";
import { backendConformanceSuite } from "../src/testing/index.js";
import { noEngineReason, requireEngine, skipDocker } from "./docker-engine.js";

// One backend for the whole suite, as one bridge has: its start-up (the engine and image checked,
// dead bridges' containers swept) is done once, before the first call.
let backend: DockerBackend | undefined;
afterAll(async () => {
  await backend?.close();
});

if (skipDocker) it.skip(`docker backend conformance (SKIPPED: ${noEngineReason})`, () => {});
else {
  backendConformanceSuite(
    "docker (podman, runc)",
    async () => {
      if (backend === undefined) {
        const { host, image, ulimits } = requireEngine();
        backend = createDockerBackend({ image, engine: host, ulimits });
      }
      await backend.ready;
      return backend;
    },
    { liveSandboxes: (backend) => (backend as DockerBackend).liveSandboxes() },
  );
}
