// Two runs into one prefix, in process against a real emulator and a real s3rver on 127.0.0.1
// (which has no conditional PUT: the sink HEADs first). The second run's outputs whose keys hold
// the first run's objects are not uploaded: the first run's bytes stay, the instances are
// "completed, upload conflict", the run exits 1 with one sentence naming the count and the
// on_conflict setting, and the report, outputs.csv and the summary name each object; the money
// is kept (report = ledger). A resume looks again and writes over nothing. An upload whose bytes
// the store cannot be made to vouch for is delivered and named "unverified".
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { runInProcess } from '../cli/in-process.js';
import { journalOf, tempDir } from '../run/runner-helpers.js';
import { startS3Proxy, type S3Proxy } from './s3-proxy.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

let emu: Emulator;
let store: LoopbackS3;
let proxy: S3Proxy;
let client: S3Client;
let undo: () => void;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.02, log: () => {} });
  store = await startLoopbackS3({ buckets: ['media'] });
  proxy = await startS3Proxy(store);
  undo = useStoreCredentials(store);
  client = new S3Client({ endpoint: store.endpoint, region: 'us-east-1', forcePathStyle: true });
});
afterAll(async () => {
  client.destroy();
  undo();
  await proxy.stop();
  await store.stop();
  await emu.close();
});

const env = (): Record<string, string | undefined> => ({
  ...process.env,
  GENPIPE_BASE_URL: emu.url,
  HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}`,
});

/** What the service's ledger took from the test's key, in US$. */
const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;

/** A pipeline of `count` character sheets into `sink`, the body colour deciding the bytes. */
function manifest(dir: string, file: string, name: string, count: number, color: string, sink: string): string {
  const path = join(dir, file);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n  output:\n    sink: ${sink}\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, body_color: "${color}", seed: "{{ seed }}" }\n`,
  );
  return path;
}

/** Every object under `prefix`, by key. */
async function objects(prefix: string): Promise<Map<string, Buffer>> {
  const listed = await client.send(new ListObjectsV2Command({ Bucket: 'media', Prefix: `${prefix}/` }));
  const found = new Map<string, Buffer>();
  for (const item of listed.Contents ?? []) {
    const got = await client.send(new GetObjectCommand({ Bucket: 'media', Key: item.Key }));
    found.set(item.Key as string, Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()));
  }
  return found;
}

const runDirOf = (output: string): string => {
  const m = /(\/\S+\/share\/\d{8}T\d{6}Z-[0-9a-f]+)/.exec(output);
  if (!m) throw new Error(`no run directory in: ${output}`);
  return m[1] as string;
};

interface ReportJson {
  total: { netUsd: number; unknownUsd: number };
  sink: {
    conflictFiles: number;
    skippedFiles: number;
    unverifiedFiles: number;
    conflicts: { instance: string; uri: string; reason: string }[];
    unverified: { uri: string; reason: string }[];
  };
  instances: {
    instance: string;
    status: string;
    uploadConflicts?: { uri: string; reason: string }[];
    unverifiedUploads?: { uri: string; reason: string }[];
  }[];
}
const reportOf = (runDir: string): ReportJson => JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as ReportJson;

/** outputs.csv as rows of cells by header (no quoted commas in these runs). */
function outputsCsv(runDir: string): Record<string, string>[] {
  const [head, ...lines] = readFileSync(join(runDir, 'outputs.csv'), 'utf8').trim().split(/\r?\n/);
  const columns = (head as string).split(',');
  return lines.map((line) => {
    const cells = line.match(/("([^"]|"")*"|[^,]*)(,|$)/g)?.map((c) => c.replace(/,$/, '').replace(/^"|"$/g, '').replace(/""/g, '"')) ?? [];
    return Object.fromEntries(columns.map((c, i) => [c, cells[i] ?? '']));
  });
}

describe('two runs into one prefix', () => {
  it(
    "the second run overwrites none of the first run's objects: upload conflicts, exit 1, named everywhere, report = ledger; a resume writes over nothing",
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const sink = `{ url: "s3://media/shared", endpoint: "${store.endpoint}" }`;
      const before = ledgerUsd();

      const first = await runInProcess(['run', manifest(dir, 'a.yaml', 'share', 2, '#cc2200', sink), '--out', out], env());
      expect(first.code, first.out + first.err).toBe(0);
      // The prefix two runs can share is warned of before the run.
      expect(first.err).toContain('run.id');
      const theirs = await objects('shared');
      expect([...theirs.keys()].sort()).toHaveLength(2);

      // A rerun after the colour changed: the same keys, other bytes; and one instance more.
      const second = await runInProcess(['run', manifest(dir, 'b.yaml', 'share', 3, '#0022cc', sink), '--out', out], env());
      const all = second.out + second.err;
      expect(second.code, all).toBe(1);
      expect(all).toContain(
        "2 outputs were not uploaded because another object with other bytes is at their keys in the storage sink (nothing was overwritten; the files are on disk): set the sink's on_conflict to overwrite to replace them, or to skip to keep them, and `genpipe resume --allow-changed`.",
      );
      const runDir = runDirOf(all);

      // The first run's bytes are still there, read back; the new instance's file went up.
      const now = await objects('shared');
      expect(now.size).toBe(3);
      for (const [key, bytes] of theirs) expect(now.get(key)?.equals(bytes), key).toBe(true);
      const added = [...now.keys()].find((k) => !theirs.has(k)) as string;
      expect(now.get(added)?.equals(readFileSync(join(runDir, 'outputs', added.slice('shared/'.length))))).toBe(true);
      // Each conflicted object is named under the summary.
      for (const key of theirs.keys())
        expect(all).toMatch(
          new RegExp(`Upload conflict: s3://media/${key.replace(/[[\]]/g, '\\$&')} \\(s\\[seed=\\d\\]\\): another object`),
        );

      // report.json: counted apart, each object named on its instance's line; completed, paid for.
      const report = reportOf(runDir);
      expect(report.sink.conflictFiles).toBe(2);
      expect(report.sink.conflicts.map((c) => c.uri).sort()).toEqual([...theirs.keys()].map((k) => `s3://media/${k}`).sort());
      const conflicted = report.instances.filter((l) => l.uploadConflicts);
      expect(conflicted.map((l) => [l.instance, l.status])).toEqual([
        ['s[seed=1]', 'completed'],
        ['s[seed=2]', 'completed'],
      ]);
      expect(conflicted[0]?.uploadConflicts?.[0]?.reason).toMatch(/^another object \(.+\) is at the key; not overwritten$/);
      const md = readFileSync(join(runDir, 'report.md'), 'utf8');
      expect(md).toContain('**2 files not uploaded: another object with other bytes is at the key**');
      expect(md).toContain('## Storage sink: objects to check');
      for (const key of theirs.keys()) expect(md).toContain(`s3://media/${key}`);
      expect(md).toMatch(/\| s\[seed=1\] \| completed, upload conflict \|/);
      const csv = readFileSync(join(runDir, 'report.csv'), 'utf8');
      expect(csv.split(/\r?\n/).filter((l) => l.startsWith('upload_conflict,'))).toHaveLength(2);
      const rows = outputsCsv(runDir);
      expect(rows.map((r) => r.sink_status?.replace(/ at [^,]+,/, ' at KEY,')).sort()).toEqual([
        'conflict: another object is at KEY, not overwritten',
        'conflict: another object is at KEY, not overwritten',
        'uploaded',
      ]);
      // Both runs' money as the service took it: the conflicts were generated and paid for, once.
      const firstNet = reportOf(runDirOf(first.out + first.err)).total.netUsd;
      expect(report.total.unknownUsd).toBe(0);
      expect(Math.round((firstNet + report.total.netUsd) * 1e6) / 1e6).toBe(Math.round((ledgerUsd() - before) * 1e6) / 1e6);

      // A resume looks again, writes over nothing, pays for nothing, and counts each conflict once.
      const ledgerBefore = ledgerUsd();
      const resumed = await runInProcess(['resume', runDir], env());
      expect(resumed.code, resumed.out + resumed.err).toBe(1);
      expect(resumed.out + resumed.err).toContain('2 outputs were not uploaded');
      const after = await objects('shared');
      for (const [key, bytes] of theirs) expect(after.get(key)?.equals(bytes), key).toBe(true);
      expect(ledgerUsd()).toBe(ledgerBefore);
      expect(reportOf(runDir).sink.conflictFiles).toBe(2);
      const records = journalOf(runDir).records;
      const overThem = records.filter((r) => (r.type === 'sink_uploaded' || r.type === 'sink_overwrite') && theirs.has(r.key));
      expect(overThem).toEqual([]);

      // The sentence's advice: with on_conflict: skip, a resume --allow-changed keeps their objects and ends 0.
      manifest(dir, 'b.yaml', 'share', 3, '#0022cc', `{ url: "s3://media/shared", endpoint: "${store.endpoint}", on_conflict: skip }`);
      const skipped = await runInProcess(['resume', runDir, '--allow-changed'], env());
      expect(skipped.code, skipped.out + skipped.err).toBe(0);
      for (const [key, bytes] of theirs) expect((await objects('shared')).get(key)?.equals(bytes), key).toBe(true);
      expect(reportOf(runDir).sink).toMatchObject({ conflictFiles: 0, skippedFiles: 2 });
      expect(ledgerUsd()).toBe(ledgerBefore);
    },
  );

  it(
    'an upload the store cannot be made to vouch for is delivered and named unverified in the report and the summary',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      proxy.rules = { opaqueEtag: true };
      try {
        const sink = `{ url: "s3://media/opaque/{{ run.id }}", endpoint: "${proxy.endpoint}", path_style: true, read_back: never }`;
        const run = await runInProcess(['run', manifest(dir, 'c.yaml', 'share', 1, '#22cc00', sink), '--out', out], env());
        const all = run.out + run.err;
        // Delivered: an unverified upload is no failure.
        expect(run.code, all).toBe(0);
        const runDir = runDirOf(all);
        const report = reportOf(runDir);
        expect(report.sink.unverifiedFiles).toBe(1);
        expect(report.sink.conflictFiles).toBe(0);
        const line = report.instances[0];
        expect(line?.unverifiedUploads).toHaveLength(1);
        const uri = line?.unverifiedUploads?.[0]?.uri as string;
        expect(uri).toMatch(/^s3:\/\/media\/opaque\/.+\/s\/.+/);
        expect(all).toContain(`Unverified upload: ${uri} (s[seed=1]): ${line?.unverifiedUploads?.[0]?.reason}.`);
        const md = readFileSync(join(runDir, 'report.md'), 'utf8');
        expect(md).toContain('1 file uploaded **unverified**');
        expect(md).toContain(`| s[seed=1] | ${uri} | unverified: `);
        expect(outputsCsv(runDir)[0]?.sink_status).toMatch(/^unverified: /);
        expect(readFileSync(join(runDir, 'report.csv'), 'utf8')).toMatch(/\r\nupload_unverified,s\[seed=1\],s,character-sheet,s3:/);
      } finally {
        proxy.rules = {};
      }
    },
  );
});
