export * from "./constants.js";
export * from "./ids.js";
export { jsonSchemas, openApiDocument, type WireSchemaName, wireSchemas } from "./openapi.js";
export * from "./schemas.js";
export {
  type FormattedOutput,
  formatOutput,
  formatSize,
  NO_OUTPUT_TEXT,
  type OutputLike,
  type TruncateOptions,
  type TruncateResult,
  truncateTail,
  truncationNotice,
  utf8ByteLength,
} from "./truncate.js";
