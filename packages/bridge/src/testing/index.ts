export {
  backendConformanceSuite,
  type ConformanceCheck,
  type ConformanceOptions,
} from "./conformance.js";
export {
  createFakeBackend,
  type FakeBackend,
  type FakeBackendOptions,
  type FakeChunk,
  type FakeScript,
  type FakeScriptFor,
  interpretCommand,
} from "./fake-backend.js";
export { readStreamEvents, type StreamEventReader } from "./stream-events.js";
