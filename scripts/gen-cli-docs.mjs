#!/usr/bin/env node
// Regenerates docs/reference/cli.md from the CLI's option tables (run `npm run docs:cli`).
// A test fails when the committed file is stale.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cliReference } from '../dist/cli/reference.js';

const target = new URL('../docs/reference/cli.md', import.meta.url);
mkdirSync(new URL('.', target), { recursive: true });
writeFileSync(target, await cliReference());
console.log('wrote docs/reference/cli.md');
