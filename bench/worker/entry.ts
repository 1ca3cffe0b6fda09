// The Worker as deployed (its default export, the real bridge on the Cloudflare backend), with
// the test suite's `TaskContainer` on a fake container bound as `TaskContainer`, for the Worker
// benchmark.
export { default } from "../../apps/worker/src/index.ts";
export { TestTaskContainer } from "../../apps/worker/test/fake-container.ts";
