#!/usr/bin/env node
// Regenerates schemas/manifest.schema.json from the zod schema (run `npm run schemas`).
// A test fails when the committed file is stale.
// It also regenerates the table of model inputs in docs/reference/manifest.md.
import { readFileSync, writeFileSync } from 'node:fs';
import { manifestJsonSchema, readmeWithModelInputs } from '../dist/manifest/json-schema.js';

writeFileSync(new URL('../schemas/manifest.schema.json', import.meta.url), manifestJsonSchema());
console.log('wrote schemas/manifest.schema.json');
const page = new URL('../docs/reference/manifest.md', import.meta.url);
writeFileSync(page, readmeWithModelInputs(readFileSync(page, 'utf8')));
console.log('wrote the model inputs of docs/reference/manifest.md');
