export * from "./constants.js";
export * from "./ids.js";
export { jsonSchemas, openApiDocument, type WireSchemaName, wireSchemas } from "./openapi.js";
export * from "./schemas.js";
export * from "./truncate.js";
