#!/usr/bin/env node
// Runs one genpipe command in this process and reports its wall time, peak RSS and CPU time (user
// and system, every thread) on stderr as JSON, so a benchmark can measure a CLI command the way a
// user runs it.
import { main } from '../../dist/cli/main.js';

const started = process.hrtime.bigint();
const code = await main(process.argv.slice(2));
const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
const usage = process.resourceUsage();
process.stderr.write(
  `\n__measure__${JSON.stringify({ code, wallMs, maxRssMb: usage.maxRSS / 1024, userS: usage.userCPUTime / 1e6, systemS: usage.systemCPUTime / 1e6 })}\n`,
);
process.exitCode = code;
