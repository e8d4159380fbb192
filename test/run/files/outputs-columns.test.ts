// outputs.csv for every model: a column per axis (a CSV axis a column per CSV
// column, prefixed), a for_each row with its upstream's axes, the request id or job set id, the
// output's role, file, sha256 and cost once per instance; outputs.jsonl holds the same records.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { cleanTemps, findRunDir, sha256File, tempDir } from '../runner-helpers.js';

afterAll(() => cleanTemps());

const pipelines = new URL('../../../pipelines', import.meta.url).pathname;

async function run(manifest: string, pipeline: string): Promise<{ runDir: string; header: string[]; rows: Record<string, string>[] }> {
  const out = tempDir();
  const stderr: string[] = [];
  const io: CliIO = { out: () => {}, write: async () => {}, err: (t) => stderr.push(t), env: {}, signal: new AbortController().signal };
  expect(await main(['run', manifest, '--emulator', '--out', out, '--quiet', '--yes'], io), stderr.join('\n')).toBe(0);
  const runDir = findRunDir(out, pipeline);
  const text = readFileSync(join(runDir, 'outputs.csv'), 'utf8');
  const header = (parseCsv(text, { to: 1 }) as string[][])[0] as string[];
  const rows = parseCsv(text, { columns: true }) as Record<string, string>[];
  // outputs.jsonl: the same records, in the same order.
  const jsonl = readFileSync(join(runDir, 'outputs.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { instance: string; file?: string; axes: Record<string, string> });
  expect(jsonl.map((r) => [r.instance, r.file ?? ''])).toEqual(rows.map((r) => [r.instance, r.file]));
  for (const row of rows) if (row.file) expect(sha256File(join(runDir, row.file as string))).toBe(row.sha256);
  return { runDir, header, rows };
}

const TRAILING = ['status', 'error', 'request_id', 'job_set_id', 'reroll_seed', 'role', 'file', 'sha256', 'cost_usd'];

describe('outputs.csv columns', () => {
  it('character-sheet (the quickstart): seed and variation_index columns, natural order', { timeout: 30_000 }, async () => {
    const { header, rows } = await run(join(pipelines, 'quickstart.yaml'), 'quickstart');
    expect(header).toEqual(['instance', 'step', 'seed', 'variation_index', ...TRAILING]);
    expect(rows.map((r) => [r.seed, r.variation_index])).toEqual([
      ['1', '0'],
      ['1', '1'],
      ['2', '0'],
      ['2', '1'],
      ['3', '0'],
      ['3', '1'],
    ]);
    for (const row of rows) expect(row).toMatchObject({ status: 'completed', role: 'image-0', cost_usd: '0.05', job_set_id: '' });
  });

  it('marketing-image from a CSV and presets: a column per CSV column, the preset by name', { timeout: 30_000 }, async () => {
    const { header, rows } = await run(join(pipelines, 'campaign.yaml'), 'campaign');
    expect(header).toEqual([
      'instance',
      'step',
      'row.sku',
      'row.region',
      'row.product_image',
      'row.headline',
      'row.mode',
      'preset',
      'resolution',
      ...TRAILING,
    ]);
    const enhanced = rows.filter((r) => r.step === 'enhanced');
    expect(enhanced.length).toBeGreaterThan(0);
    for (const row of enhanced) {
      expect(row['row.sku']).toMatch(/^[A-Z]+-\d{3}$/);
      expect(row.preset).toMatch(/Market/);
      expect(row.request_id).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it('dop for_each sheets, an agent turn and Soul: upstream axes, job set ids, roles', { timeout: 60_000 }, async () => {
    const { header, rows } = await run(join(pipelines, 'nightly.yaml'), 'nightly');
    expect(header).toEqual(['instance', 'step', 'tier', 'seed', ...TRAILING]);
    const clip = rows.filter((r) => r.instance === 'clips[sheets[tier=frogs,seed=7]]');
    expect(clip.map((r) => r.role)).toEqual(['job-0-raw', 'job-0-min']);
    expect(clip[0]).toMatchObject({ tier: 'frogs', seed: '7', request_id: '', cost_usd: '0.25' });
    expect(clip[0]?.job_set_id).toMatch(/^[0-9a-f-]{36}$/);
    // The cost once per instance, so the column sums to the run's cost.
    expect(clip[1]?.cost_usd).toBe('');
    const note = rows.filter((r) => r.step === 'release-note');
    expect(note.map((r) => r.role).sort()).toEqual(['answer', 'image-0']);
    expect(rows.filter((r) => r.step === 'banner').length).toBeGreaterThan(0);
  });

  it('speak and soul-standard rows', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const manifest = join(dir, 'voices.yaml');
    writeFileSync(
      manifest,
      `version: 1
name: voices
prices: { speak: 0.1, soul-standard: 0.02 }
steps:
  talk:
    model: speak
    matrix:
      quality: [720p]
    input:
      prompt: Hello there
      quality: "{{ quality }}"
      input_image: { type: image_url, image_url: "https://cdn.example.test/face.png" }
      input_audio: { type: audio_url, audio_url: "https://cdn.example.test/hello.wav" }
  poster:
    model: soul-standard
    matrix:
      aspect_ratio: ["1:1", "16:9"]
    input: { prompt: A poster, aspect_ratio: "{{ aspect_ratio }}", resolution: 1080p }
`,
    );
    const { header, rows } = await run(manifest, 'voices');
    expect(header).toEqual(['instance', 'step', 'quality', 'aspect_ratio', ...TRAILING]);
    expect(rows.filter((r) => r.step === 'poster').map((r) => r.aspect_ratio)).toEqual(['1:1', '16:9']);
    expect(rows.find((r) => r.step === 'talk')).toMatchObject({ quality: '720p', status: 'completed' });
  });
});
