// The Worker as deployed (its default export, the real bridge on the Cloudflare backend), with
// the test suite's fake Sandbox Durable Object bound as `Sandbox`, for the Worker benchmark.
export { default } from "../../apps/worker/src/index.ts";
export { FakeSandbox } from "../../apps/worker/test/fake-sandbox.ts";
