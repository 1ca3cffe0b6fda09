import { createLocalBackend, type LocalBackend } from "../src/local/index.js";
import {
  backendConformanceSuite,
  createFakeBackend,
  type FakeBackend,
} from "../src/testing/index.js";
import { isolationModes } from "./isolation.js";

/** What the fake cannot take part in: it interprets the suite's vocabulary, not a shell. */
const FAKE_SKIPS = {
  bash: "it interprets the suite's small vocabulary, not bash",
  "missing-cwd": "it has no file system: every cwd is taken as given",
};

backendConformanceSuite("fake", () => createFakeBackend(), {
  liveSandboxes: (backend) => (backend as FakeBackend).liveSandboxes(),
  skip: FAKE_SKIPS,
});

backendConformanceSuite(
  "fake with 50 ms start latency",
  () => createFakeBackend({ startLatencyMs: 50 }),
  {
    liveSandboxes: (backend) => (backend as FakeBackend).liveSandboxes(),
    skip: FAKE_SKIPS,
  },
);

for (const { mode, skip, title } of isolationModes) {
  if (skip) continue;
  backendConformanceSuite(`local, ${title}`, () => createLocalBackend({ isolation: mode }), {
    liveSandboxes: (backend) => (backend as LocalBackend).liveSandboxes(),
  });
}
