#!/usr/bin/env node
// The cost report of a 1,000,000-instance run: `genpipe report RUN_DIR` as a
// whole process (the same function writes the end-of-run report), on a journal written here the
// way a run writes it (intent, submitted, status with two output URLs, downloaded: about 0.9 KB
// per instance), wall time and peak RSS, and the same for 100,000 instances: a report's memory
// must not grow with the run. Targets: <= 10 s and <= 300 MB for 1,000,000 instances, and
// <= 1.2x a bare streaming reader of the same journal (lib/bare-journal-reader.mjs, a
// process of its own timed from spawn to exit, as genpipe is). The report printed (--json) goes to
// /dev/null, as to a file a user redirects it to.
import { createWriteStream, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { spawn, spawnSync } from 'node:child_process';
import { encodeJournalRecord } from '../dist/run/journal/journal.js';
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

/** A run directory whose journal holds `instances` completed character sheets. */
async function runDir(instances) {
  const run = join(dir, `r${instances}`, 'million', '20261101T000000Z-0000');
  mkdirSync(join(run, 'outputs'), { recursive: true });
  writeFileSync(
    join(run, 'plan.json'),
    JSON.stringify({
      pipeline: 'million',
      runId: '20261101T000000Z-0000',
      manifest: join(dir, 'million.yaml'),
      planHash: 'x',
      createdAt: '2026-11-01T00:00:00.000Z',
      steps: [{ id: 'sheets', model: 'character-sheet', count: instances, needs: [], for_each: null, price_usd: 0.05 }],
      estimate: { known_usd: instances * 0.05, unknown_instances: 0 },
    }),
  );
  const out = createWriteStream(join(run, 'journal.jsonl'));
  const t0 = 1_793_000_000_000;
  const write = async (record) => {
    if (!out.write(encodeJournalRecord(record))) await once(out, 'drain');
  };
  await write({ type: 'run_started', runId: '20261101T000000Z-0000', pipeline: 'million', planHash: 'x', at: t0 });
  const hex = (n, width) => n.toString(16).padStart(width, '0');
  for (let i = 0; i < instances; i++) {
    const seed = Math.floor(i / 1000) + 1;
    const id = `sheets[seed=${seed},variation_index=${i % 1000}]`;
    const requestId = `${hex(i, 8)}-0000-4000-8000-${hex(i, 12)}`;
    const at = t0 + i;
    await write({
      type: 'intent',
      instance: id,
      model: 'character-sheet',
      idempotencyKey: `${hex(i, 16)}${hex(i, 16)}`,
      bodyHash: hex(i, 64),
      at,
    });
    await write({ type: 'submitted', instance: id, handle: { kind: 'request', requestId }, at });
    const outputs = [
      { url: `https://cdn.example.com/results/${requestId}/min.png`, name: 'min', accept: ['image/png', 'image/jpeg', 'image/webp'] },
      { url: `https://cdn.example.com/results/${requestId}/raw.png`, name: 'raw', accept: ['image/png', 'image/jpeg', 'image/webp'] },
    ];
    await write({
      type: 'status',
      instance: id,
      status: 'completed',
      outputs,
      result: { request_id: requestId, status: 'completed', images: [{ url: outputs[0].url }] },
      durationMs: 3000,
      at: at + 3000,
    });
    await write({
      type: 'downloaded',
      instance: id,
      output: 0,
      path: `outputs/sheets/${id}.min.png`,
      sha256: hex(i, 64),
      size: 120_000,
      // As a run journals an image since it records sizes at download: the emulator's sheets are 160x90.
      width: 160,
      height: 90,
      at: at + 3100,
    });
  }
  await write({ type: 'run_finished', outcome: 'completed', at: t0 + instances + 5000 });
  out.end();
  await once(out, 'finish');
  return { run, journalMb: statSync(join(run, 'journal.jsonl')).size / 2 ** 20 };
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
