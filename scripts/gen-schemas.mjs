#!/usr/bin/env node
// Regenerates schemas/manifest.schema.json from the zod schema (run `npm run schemas`).
// A test fails when the committed file is stale.
// It also regenerates the manifest reference page, docs/reference/manifest.md (model inputs included).
import { mkdirSync, writeFileSync } from 'node:fs';
import {
  MANIFEST_REFERENCE_PATH,
  manifestJsonSchema,
  manifestReferenceMarkdown,
  undocumentedFields,
} from '../dist/manifest/json-schema.js';

writeFileSync(new URL('../schemas/manifest.schema.json', import.meta.url), manifestJsonSchema());
console.log('wrote schemas/manifest.schema.json');
const missing = undocumentedFields();
if (missing.length > 0) {
  console.error(`fields without a description or an example in src/manifest/schema.ts:\n  ${missing.join('\n  ')}`);
  process.exitCode = 1;
}
mkdirSync(new URL('../docs/reference/', import.meta.url), { recursive: true });
writeFileSync(new URL(`../${MANIFEST_REFERENCE_PATH}`, import.meta.url), manifestReferenceMarkdown());
console.log(`wrote ${MANIFEST_REFERENCE_PATH}`);
