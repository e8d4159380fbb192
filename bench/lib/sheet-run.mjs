// A run directory of `instances` completed character sheets, written the way a run writes it:
// plan.json, then a journal by genpipe's own journal writer (run_started; for each sheet intent,
// submitted, status with its output URLs, downloaded; run_finished). The report-million and
// ui-first-screen benchmarks both read such a run, so both write it here, one way.
import { createWriteStream, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import { encodeJournalRecord } from '../../dist/run/journal/journal.js';

const PRICE_USD = 0.05;
const hex = (n, width) => n.toString(16).padStart(width, '0');

/**
 * Writes the run at `run` and resolves once its journal is on disk.
 * - `outputs`: the names of each sheet's output URLs (the first is downloaded);
 * - `options`: what run_started records (left out when undefined);
 * - `journaled(record)`: told of each record as it is written (a summary writer, say).
 * Returns the journal's size in MiB.
 */
export async function writeSheetRun(run, { pipeline, runId, manifest, instances, t0, outputs = ['min'], options, journaled }) {
  mkdirSync(join(run, 'outputs'), { recursive: true });
  const steps = [{ id: 'sheets', model: 'character-sheet', count: instances, needs: [], for_each: null, price_usd: PRICE_USD }];
  writeFileSync(
    join(run, 'plan.json'),
    JSON.stringify({
      pipeline,
      runId,
      manifest,
      planHash: 'x',
      createdAt: new Date(t0).toISOString(),
      steps,
      estimate: { known_usd: instances * PRICE_USD, unknown_instances: 0 },
    }),
  );
  const out = createWriteStream(join(run, 'journal.jsonl'));
  const write = async (record) => {
    if (!out.write(encodeJournalRecord(record))) await once(out, 'drain');
    journaled?.(record);
  };
  await write({ type: 'run_started', runId, pipeline, planHash: 'x', ...(options === undefined ? {} : { options }), at: t0 });
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
    const urls = outputs.map((name) => ({
      url: `https://cdn.example.com/results/${requestId}/${name}.png`,
      name,
      accept: ['image/png', 'image/jpeg', 'image/webp'],
    }));
    await write({
      type: 'status',
      instance: id,
      status: 'completed',
      outputs: urls,
      result: { request_id: requestId, status: 'completed', images: [{ url: urls[0].url }] },
      durationMs: 3000,
      at: at + 3000,
    });
    await write({
      type: 'downloaded',
      instance: id,
      output: 0,
      path: `outputs/sheets/${id}.${outputs[0]}.png`,
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
  return statSync(join(run, 'journal.jsonl')).size / 2 ** 20;
}

/** The step a sheet run's plan holds, as a run's fold is given it. */
export const sheetSteps = (instances) => [{ id: 'sheets', count: instances, priceUsd: PRICE_USD, model: 'character-sheet' }];
