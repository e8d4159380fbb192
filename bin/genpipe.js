#!/usr/bin/env node
// The CLI is compiled to dist/ by `npm install` (the `prepare` script), and bundled into
// dist/bundle/ for a fast start (scripts/bundle-cli.mjs); the unbundled build is the fallback.
import { existsSync } from 'node:fs';

const bundled = new URL('../dist/bundle/main.js', import.meta.url);
const { main } = await import(existsSync(bundled) ? bundled.href : '../dist/cli/main.js');

process.exitCode = await main(process.argv.slice(2));
