// Public links are built from encoded segments: a prefix whose template value holds `#`, `?`, a
// space, `%` and a non-ASCII letter, and files whose names hold non-ASCII letters, give links whose
// path decodes to the object's key exactly (no fragment, no query, no escape of the user's own),
// the same in outputs.csv, outputs.jsonl, the gallery and the notifications. Against a real
// emulator and s3rver on 127.0.0.1.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { readGallery } from '../gallery/read-gallery.js';
import { receiver, type Received } from '../notify/receiver.js';
import { cleanTemps, findRunDir, journalOf, tempDir } from '../run/runner-helpers.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

const FOLDER = 'a #1? 100% é';
/** The folder as a URL path segment: every character that is not plain, percent-encoded (UTF-8 for é). */
const FOLDER_IN_URL = 'a%20%231%3F%20100%25%20%C3%A9';
const BASE = `https://cdn.example.com/drops/${FOLDER_IN_URL}`;

let emu: Emulator;
let store: LoopbackS3;
let undo: () => void;
let runDir: string;
let hooks: Received[];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.02, log: () => {} });
  store = await startLoopbackS3({ buckets: ['media'] });
  undo = useStoreCredentials(store);
  const hook = await receiver();
  const dir = tempDir();
  const manifest = join(dir, 'links.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: links
vars: { folder: "${FOLDER}" }
notify:
  - { url: "${hook.url}/json" }
  - { url: "${hook.url}/slack", format: slack }
defaults:
  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }
  output:
    sink: { url: "s3://media/links/{{ vars.folder }}", endpoint: "${store.endpoint}", path_style: true, public_base_url: "https://cdn.example.com/drops/{{ vars.folder }}" }
steps:
  s:
    model: character-sheet
    matrix: { look: [café, naïve] }
    input: { tier: cats, brief: "a {{ look }} cat" }
`,
  );
  const out = tempDir();
  const lines: string[] = [];
  const io: CliIO = {
    out: (t) => lines.push(t),
    write: async (t) => void lines.push(t),
    err: (t) => lines.push(t),
    env: { ...process.env, GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const code = await main(['run', manifest, '--out', out, '--quiet'], io).finally(() => hook.close());
  expect(code, lines.join('\n')).toBe(0);
  runDir = findRunDir(out, 'links');
  hooks = hook.received;
}, 60_000);

afterAll(async () => {
  undo?.();
  await store?.stop();
  await emu?.close();
  cleanTemps();
});

/** The link each file must have, by its path under the run directory. */
function expectedLinks(): Map<string, string> {
  const files = readdirSync(join(runDir, 'outputs', 's'));
  expect(files).toHaveLength(2);
  // The file names carry the axis labels, non-ASCII included.
  expect(files.some((f) => f.includes('café'))).toBe(true);
  return new Map(files.map((f) => [`outputs/s/${f}`, `${BASE}/s/${encodeURIComponent(f)}`]));
}

/** A link's path, decoded, is the object's key under the public prefix: nothing became a fragment or a query. */
function expectNamesItsObject(link: string): void {
  const url = new URL(link);
  expect(url.hash).toBe('');
  expect(url.search).toBe('');
  const uploaded = journalOf(runDir)
    .records.filter((r) => r.type === 'sink_uploaded')
    .map((r) => (r as { key: string }).key);
  const key = decodeURIComponent(url.pathname.slice('/drops/'.length));
  expect(uploaded).toContain(`links/${key}`);
}

describe('public links of a prefix and files with #, ?, space, % and non-ASCII', () => {
  it('outputs.csv and outputs.jsonl: each sink_url is the base and file name, each segment percent-encoded', () => {
    const expected = expectedLinks();
    const rows = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
    expect(new Map(rows.map((r) => [r.file, r.sink_url]))).toEqual(expected);
    const lines = readFileSync(join(runDir, 'outputs.jsonl'), 'utf8')
      .split('\n')
      .filter((l) => l !== '');
    const jsonl = lines.map((l) => JSON.parse(l) as { file: string; sink_url?: string });
    expect(new Map(jsonl.map((r) => [r.file, r.sink_url]))).toEqual(expected);
    for (const link of expected.values()) expectNamesItsObject(link);
  });

  it('the gallery links the same URLs', () => {
    const expected = expectedLinks();
    const gallery = readGallery((p) => readFileSync(join(runDir, p), 'utf8'));
    const links = new Map(gallery.steps.flatMap((s) => s.cells.flatMap((c) => c.files.map((f) => [f.path, f.url]))));
    expect(links).toEqual(expected);
  });

  it('the notifications give the prefix by the same encoded base', () => {
    const json = hooks.find((h) => h.path === '/json')?.body as { sink: { locations: { uri: string; public_url: string }[] } };
    expect(json.sink.locations).toEqual([{ uri: `s3://media/links/${FOLDER}`, public_url: BASE }]);
    const slack = hooks.find((h) => h.path === '/slack')?.body as { text: string };
    expect(slack.text).toContain(`public at ${BASE};`.replace(';', ''));
  });
});
