#!/usr/bin/env node
// Runs one genpipe command in this process and reports its wall time, peak RSS and CPU time (user
// and system, every thread) on stderr as JSON, so a benchmark can measure a CLI command the way a
// user runs it.
import { main } from '../../dist/cli/main.js';
import { writeMeasure } from './measure-line.mjs';

const started = process.hrtime.bigint();
const code = await main(process.argv.slice(2));
const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
writeMeasure({ code, wallMs });
process.exitCode = code;
