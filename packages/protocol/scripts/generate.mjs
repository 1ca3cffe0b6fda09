// Writes schemas/*.json, schemas/openapi.json and PROTOCOL.md from the built package.
import { mkdirSync, writeFileSync } from "node:fs";
import * as protocol from "../dist/index.js";
import { renderProtocolMarkdown } from "./render-protocol-md.mjs";

const root = new URL("../", import.meta.url);
mkdirSync(new URL("schemas/", root), { recursive: true });
for (const [name, schema] of Object.entries(protocol.jsonSchemas())) {
  writeFileSync(new URL(`schemas/${name}.json`, root), `${JSON.stringify(schema, null, 2)}\n`);
}
writeFileSync(
  new URL("schemas/openapi.json", root),
  `${JSON.stringify(protocol.openApiDocument(), null, 2)}\n`,
);
writeFileSync(new URL("PROTOCOL.md", root), renderProtocolMarkdown(protocol));
