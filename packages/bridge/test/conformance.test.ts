import { createLocalBackend, type LocalBackend } from "../src/local/index.js";
import {
  backendConformanceSuite,
  createFakeBackend,
  type FakeBackend,
} from "../src/testing/index.js";
import { isolationModes } from "./isolation.js";

backendConformanceSuite("fake", () => createFakeBackend(), {
  liveSandboxes: (backend) => (backend as FakeBackend).liveSandboxes(),
});

backendConformanceSuite(
  "fake with 50 ms start latency",
  () => createFakeBackend({ startLatencyMs: 50 }),
  {
    liveSandboxes: (backend) => (backend as FakeBackend).liveSandboxes(),
  },
);

for (const { mode, skip, title } of isolationModes) {
  if (skip) continue;
  backendConformanceSuite(`local, ${title}`, () => createLocalBackend({ isolation: mode }), {
    liveSandboxes: (backend) => (backend as LocalBackend).liveSandboxes(),
  });
}
