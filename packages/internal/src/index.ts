export { type RaceAbortOptions, raceAbort } from "./abort.js";
export { fromBase64, toBase64 } from "./base64.js";
export { brandClass, hasBrand } from "./brand.js";
export { concatBytes } from "./bytes.js";
export { requireIntegerAtLeast } from "./checks.js";
export {
  issuesInWords,
  issuesOf,
  type PathIssue,
  type SchemaIssue,
  summarizeIssues,
} from "./issues.js";
export {
  MIN_SECRET_LENGTH,
  REDACTED,
  redact,
  shorten,
  WHOLE_WORD_SECRET_LENGTH,
} from "./redact.js";
export { retryAfterHeader } from "./retry-after.js";
export { TailBuffer } from "./tail-buffer.js";
export {
  BRIDGE_TEXTS,
  CLOUDFLARE_TEXTS,
  DID_NOT_RUN,
  DOCKER_TEXTS,
  OWN_TEXTS,
  SANDBOX_TEXTS,
  undeclaredSecrets,
  unreadableSecret,
} from "./texts.js";
export { MAX_TIMER_MS, timerDelay } from "./timers.js";
