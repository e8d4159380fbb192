#!/usr/bin/env node
// The cost report of a 1,000,000-instance run: `genpipe report RUN_DIR` as a
// whole process (the same function writes the end-of-run report), on a journal written here the
// way a run writes it (intent, submitted, status with two output URLs, downloaded: about 0.9 KB
// per instance), wall time and peak RSS, and the same for 100,000 instances: a report's memory
// must not grow with the run. Targets: <= 10 s and <= 300 MB for 1,000,000 instances, and
// <= 1.2x a bare streaming reader of the same journal (lib/bare-journal-reader.mjs, a
// process of its own timed from spawn to exit, as genpipe is). The report printed (--json) goes to
// /dev/null, as to a file a user redirects it to.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { spawn, spawnSync } from 'node:child_process';
import { writeSheetRun } from './lib/sheet-run.mjs';
import { here, measuredIn, median, runGenpipe, scratchDir, writeResults } from './lib/harness.mjs';

/** The bare reader of a journal, timed from spawn to exit: wall ms and peak RSS. */
async function bareRead(journal) {
  const started = process.hrtime.bigint();
  const child = spawn(process.execPath, [join(here, 'lib', 'bare-journal-reader.mjs'), journal], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const [code] = await once(child, 'exit');
  if (code !== 0) throw new Error(`the bare reader failed (exit ${code}): ${stderr.slice(-800)}`);
  return { wallMs: Number(process.hrtime.bigint() - started) / 1e6, maxRssMb: measuredIn(stderr)?.maxRssMb };
}

const runs = Number(process.env.BENCH_RUNS ?? 3);

/**
 * Writes what the page cache holds to disk before a timed run: the journal just written here (1.3 GB
 * for a million) and the reports of the runs before would otherwise be written back while the
 * next run reads, and a run would pay for its predecessors' writes (genpipe's report writes 560 MB
 * of files; the bare reader writes none).
 */
const settle = () => spawnSync('sync');
const dir = scratchDir('report');

/** A run directory whose journal holds `instances` completed character sheets, two output URLs each. */
async function runDir(instances) {
  const run = join(dir, `r${instances}`, 'million', '20261101T000000Z-0000');
  const journalMb = await writeSheetRun(run, {
    pipeline: 'million',
    runId: '20261101T000000Z-0000',
    manifest: join(dir, 'million.yaml'),
    instances,
    t0: 1_793_000_000_000,
    outputs: ['min', 'raw'],
  });
  return { run, journalMb };
}

const results = [];
for (const instances of (process.env.BENCH_SIZES ?? '100000,1000000').split(',').map(Number)) {
  const { run, journalMb } = await runDir(instances);
  const walls = [];
  const rss = [];
  const bareWalls = [];
  // Alternated, so that a drift of the machine's speed reaches both alike.
  for (let i = 0; i < runs; i++) {
    settle();
    const result = await runGenpipe(['report', run, '--json'], {}, { discardStdout: true });
    if (result.code !== 0) throw new Error(`genpipe report failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    walls.push(result.wallMs / 1000);
    rss.push(result.maxRssMb);
    settle();
    bareWalls.push((await bareRead(join(run, 'journal.jsonl'))).wallMs / 1000);
  }
  results.push({
    label: `report of ${instances.toLocaleString('en-US')} instances`,
    instances,
    journal_mb: Math.round(journalMb),
    runs,
    median_wall_s: median(walls),
    median_peak_rss_mb: median(rss),
    bare_reader_median_wall_s: median(bareWalls),
    ratio_to_bare_reader: Number((median(walls) / median(bareWalls)).toFixed(3)),
    // 1.2x for a million (its second round); 1.5x for 100,000, whose report also rewrites the gallery.
    target_ratio_to_bare_reader: instances === 1_000_000 ? 1.2 : 1.5,
    target_wall_s: instances === 1_000_000 ? 10 : null,
    target_peak_rss_mb: instances === 1_000_000 ? 300 : null,
  });
  if (!process.env.BENCH_KEEP) rmSync(join(dir, `r${instances}`), { recursive: true, force: true });
  else console.log(`kept ${run}`);
}
writeResults('report-million', { results });
console.table(
  Object.fromEntries(
    results.map((r) => [
      r.label,
      {
        'journal MB': r.journal_mb,
        'median s': r.median_wall_s.toFixed(2),
        'median peak RSS MB': r.median_peak_rss_mb.toFixed(0),
        'bare reader s': r.bare_reader_median_wall_s.toFixed(2),
        'x of the bare reader': r.ratio_to_bare_reader,
      },
    ]),
  ),
);
