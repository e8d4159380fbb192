// `npm run test:unit`: the quick half of the suite, for editing. A test file belongs to it unless
// its text starts another program (the genpipe CLI through runCli, any spawn or exec), a browser
// (Chromium), Redis or a worker thread, or it is one of the slow files below. The choice is made
// from each file's text when vitest starts, so a new test file needs no list to be placed.
// `npm test` still runs every file (vitest.config.ts).
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

const ROOT = import.meta.dirname;
/** What a test that is not a unit test says in its own text. */
const NOT_UNIT = /\brunCli\(|\bspawn|\bexecFile|\bexec\(|\bfork\(|[Cc]hromium|[Rr]edis|new Worker\(|worker_threads|\bBIN\b|bin\/genpipe/;
/**
 * In-process but slow, left to `npm test`: each took 9 s or more in a run of the rest (2026-11-27,
 * on the 2-core machine under a load of 13), against under 9 s for every other file.
 */
const SLOW = new Set([
  'test/run/runner-torn-journal.test.ts', // 53 s: runs, then tears and resumes them
  'test/notify/notify.test.ts', // 34 s: delivery retries and deadlines against real servers
  'test/report/instance-lines.test.ts', // 27 s: a property over journals read by two threads
  'test/run/runner-soak.test.ts', // 27 s
  'test/run/money-per-attempt.test.ts', // 19 s
  'test/cli/resume-service.test.ts', // 16 s
  'test/manifest/load.test.ts', // 14 s: a chain of 12,000 steps
  'test/cli/money-guards.test.ts', // 13 s
  'test/run/outputs-columns.test.ts', // 13 s
  'test/manifest/fuzz.test.ts', // 11 s: property runs
  'test/cli/main.test.ts', // 10 s: unreachable services
]);

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(path);
    return entry.name.endsWith('.test.ts') ? [relative(ROOT, path)] : [];
  });
}

const unit = testFiles(join(ROOT, 'test')).filter((file) => !SLOW.has(file) && !NOT_UNIT.test(readFileSync(join(ROOT, file), 'utf8')));

// Not mergeConfig: it would add these files to the base's include, not replace it.
export default defineConfig({ ...base, test: { ...base.test, include: unit } });
