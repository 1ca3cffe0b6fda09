import { createLocalBackend, type LocalBackend } from "../src/local/index.js";
import {
  backendConformanceSuite,
  createFakeBackend,
  type FakeBackend,
} from "../src/testing/index.js";

backendConformanceSuite("fake", () => createFakeBackend(), {
  liveSandboxes: (backend) => (backend as FakeBackend).liveSandboxes(),
});

backendConformanceSuite("local (isolation none)", () => createLocalBackend({ isolation: "none" }), {
  liveSandboxes: (backend) => (backend as LocalBackend).liveSandboxes(),
});
