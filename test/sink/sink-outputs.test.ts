// outputs.csv and outputs.jsonl of a run with a storage sink: sink_uri once a file
// is in the bucket (its sink_uploaded record has the file's sha256), sink_url from public_base_url,
// both empty for a file still pending; a run without a sink keeps its columns as they were.
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import { outputRows } from '../../src/run/files/output-rows.js';
import { OutputsCsv } from '../../src/run/files/outputs-csv.js';
import { applyRecord, emptyRunState, type InstanceState } from '../../src/run/journal/run-state.js';
import { objectKey, publicUrl, resolveSink } from '../../src/sink/sink-config.js';

const sink = resolveSink(
  { url: 's3://assets/spring', public_base_url: 'https://cdn.example.com/spring' },
  { run: { id: 'r', startedAt: new Date() }, vars: {}, env: {} },
  {},
);

/** An instance with two files, the first in the sink, the second made but not uploaded. */
function instance(): InstanceState {
  const state = emptyRunState();
  applyRecord(state, {
    type: 'status',
    instance: 'a[seed=1]',
    status: 'completed',
    outputs: [
      { url: 'u0', name: 'image-0' },
      { url: 'u1', name: 'image-1' },
    ],
  });
  applyRecord(state, { type: 'downloaded', instance: 'a[seed=1]', output: 0, path: 'outputs/a/1+0.png', sha256: 'a'.repeat(64), size: 3 });
  applyRecord(state, { type: 'downloaded', instance: 'a[seed=1]', output: 1, path: 'outputs/a/1+1.png', sha256: 'b'.repeat(64), size: 3 });
  applyRecord(state, {
    type: 'sink_uploaded',
    instance: 'a[seed=1]',
    output: 0,
    bucket: 'assets',
    key: objectKey(sink, 'outputs/a/1+0.png'),
    size: 3,
    sha256: 'a'.repeat(64),
    etag: 'e',
  });
  return state.instances.get('a[seed=1]') as InstanceState;
}

describe('outputs of a run with a sink', () => {
  it('name each uploaded file by its s3:// URI and public URL; a pending one has neither', async () => {
    const runDir = await mkdtemp(join(tmpdir(), 'genpipe-sink-outputs-'));
    const csv = await OutputsCsv.open(runDir, ['seed'], { sink: true });
    csv.add(
      'a[seed=1]',
      outputRows('a[seed=1]', instance(), { step: undefined, values: { seed: 1 }, sink: { url: (path) => publicUrl(sink, path) } }),
    );
    await csv.write([]);
    const text = await readFile(join(runDir, 'outputs.csv'), 'utf8');
    expect(text.split('\r\n')[0]).toBe(
      'instance,step,seed,status,error,request_id,job_set_id,reroll_seed,role,file,sha256,cost_usd,sink_uri,sink_url,sink_status',
    );
    const rows = parseCsv(text, { columns: true }) as Record<string, string>[];
    expect(rows.map((r) => [r.file, r.sink_uri, r.sink_url, r.sink_status])).toEqual([
      ['outputs/a/1+0.png', 's3://assets/spring/a/1+0.png', 'https://cdn.example.com/spring/a/1%2B0.png', 'uploaded'],
      ['outputs/a/1+1.png', '', '', 'pending'],
    ]);
    const jsonl = (await readFile(join(runDir, 'outputs.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(jsonl[0]).toMatchObject({ sink_uri: 's3://assets/spring/a/1+0.png', sink_url: 'https://cdn.example.com/spring/a/1%2B0.png' });
    expect(jsonl[1]).not.toHaveProperty('sink_uri');
  });

  it('a run without a sink keeps the columns it had', async () => {
    const runDir = await mkdtemp(join(tmpdir(), 'genpipe-sink-outputs-'));
    const csv = await OutputsCsv.open(runDir, ['seed']);
    csv.add('a[seed=1]', outputRows('a[seed=1]', instance(), { step: undefined, values: { seed: 1 } }));
    await csv.write([]);
    expect((await readFile(join(runDir, 'outputs.csv'), 'utf8')).split('\r\n')[0]).toBe(
      'instance,step,seed,status,error,request_id,job_set_id,reroll_seed,role,file,sha256,cost_usd',
    );
  });
});
