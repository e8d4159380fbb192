#!/usr/bin/env node
// Regenerates schemas/manifest.schema.json from the zod schema (run `npm run schemas`).
// A test fails when the committed file is stale.
import { writeFileSync } from 'node:fs';
import { manifestJsonSchema } from '../dist/manifest/json-schema.js';

writeFileSync(new URL('../schemas/manifest.schema.json', import.meta.url), manifestJsonSchema());
console.log('wrote schemas/manifest.schema.json');
