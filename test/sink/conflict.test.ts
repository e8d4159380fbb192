// The sink never destroys an object genpipe did not write for this file: a real s3rver on
// 127.0.0.1 (which ignores If-None-Match on a PUT: a HEAD goes first) and a small front that
// honours it as S3 does (s3-proxy.ts), or refuses HEAD with 403. Another object at a key is a
// conflict (nothing overwritten) unless the sink says `on_conflict: skip` or `overwrite`.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifestText } from '../../src/manifest/load.js';
import { JournalRecord, type JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, pendingSinkUploads, sinkConflicts } from '../../src/run/journal/run-state.js';
import { RunSinks, type SinkRecord, type StepSink } from '../../src/sink/run-sinks.js';
import { startS3Proxy, type S3Proxy } from './s3-proxy.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

const BUCKET = 'genpipe-conflict';
const RUN = { id: '20261202T040000Z-ef56', startedAt: new Date('2026-12-02T04:00:00.000Z') };

let store: LoopbackS3;
let proxy: S3Proxy;
let direct: S3Client;
let restoreEnv: () => void;
const runDir = mkdtempSync(join(tmpdir(), 'genpipe-conflict-run-'));
const opened: RunSinks[] = [];

beforeAll(async () => {
  store = await startLoopbackS3({ buckets: [BUCKET] });
  proxy = await startS3Proxy(store);
  restoreEnv = useStoreCredentials(store);
  direct = new S3Client({ endpoint: store.endpoint, forcePathStyle: true, region: 'us-east-1' });
});
afterAll(async () => {
  for (const sinks of opened) sinks.close();
  direct.destroy();
  restoreEnv();
  await proxy.stop();
  await store.stop();
});

/** The run's sinks at `endpoint` (s3rver itself, or the proxy), with the long form's extra fields. */
async function openSinks(endpoint: string, extra = ''): Promise<RunSinks> {
  const text = `version: 1\nname: t\ndefaults:\n  output:\n    sink: {url: "s3://${BUCKET}/drops", endpoint: "${endpoint}"${extra}}\nsteps:\n  sheets:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: a cat\n`;
  const sinks = await RunSinks.open(loadManifestText(text, 'm.yaml'), RUN);
  if (!sinks) throw new Error('expected sinks');
  opened.push(sinks);
  return sinks;
}

async function preflighted(endpoint: string, extra = ''): Promise<StepSink> {
  const sinks = await openSinks(endpoint, extra);
  expect(await sinks.preflight()).toBeUndefined();
  return sinks.forStep('sheets') as StepSink;
}

function output(name: string, bytes: Buffer): JournalRecordOf<'downloaded'> {
  const path = `outputs/sheets/${name}`;
  mkdirSync(join(runDir, 'outputs/sheets'), { recursive: true });
  writeFileSync(join(runDir, path), bytes);
  return { type: 'downloaded', instance: name.replace(/\..*$/, ''), output: 0, path, sha256: sha256(bytes), size: bytes.length };
}

const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');
const md5 = (bytes: Buffer): string => createHash('md5').update(bytes).digest('hex');
const keyOf = (name: string): string => `drops/sheets/${name}`;
/** A fresh run's upload: the caller says the file is new (no resume), so only a store's own rule protects. */
const fresh = { consumeRetry: () => false, checkExisting: false };

/** Another run's object at the key (not genpipe's for this file). */
async function putOther(name: string, bytes: Buffer, metadata?: Record<string, string>): Promise<void> {
  await direct.send(new PutObjectCommand({ Bucket: BUCKET, Key: keyOf(name), Body: bytes, ...(metadata ? { Metadata: metadata } : {}) }));
}

async function storedBytes(name: string): Promise<Buffer> {
  const got = await direct.send(new GetObjectCommand({ Bucket: BUCKET, Key: keyOf(name) }));
  return Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
}

async function upload(sink: StepSink, download: JournalRecordOf<'downloaded'>) {
  const journal: SinkRecord[] = [];
  const last = await sink.uploadOutput(runDir, download.instance, download, fresh, async (record) => {
    journal.push(record);
  });
  return { last, journal };
}

describe('the sink never overwrites an object it did not write', () => {
  it('the preflight finds out whether PUTs are conditional: only a 412 on the second probe says so', async () => {
    const plain = await openSinks(store.endpoint);
    expect(await plain.preflight()).toBeUndefined();
    expect((plain.forStep('sheets') as StepSink).store.conditional).toBe(false);
    proxy.rules = { conditional: true };
    const conditional = await openSinks(proxy.endpoint);
    expect(await conditional.preflight()).toBeUndefined();
    expect((conditional.forStep('sheets') as StepSink).store.conditional).toBe(true);
    const probes = proxy.seen.filter((r) => r.method === 'PUT' && r.url.includes('.genpipe-probe-'));
    expect(probes.map((r) => r.headers['if-none-match'])).toEqual(['*', '*']);
  });

  it('a store that refuses HEAD (403) is refused at preflight, in one sentence, unless on_conflict: overwrite', async () => {
    proxy.rules = { refuseHead: true };
    const sinks = await openSinks(proxy.endpoint);
    const problem = await sinks.preflight();
    expect(problem?.message).toBe(
      `The store lets these credentials write to s3://${BUCKET}/drops but refuses to let them read what is there (HEAD refused, HTTP 403), so genpipe cannot tell another run's object from its own and will not write over it: allow s3:GetObject on the bucket, or set the sink's on_conflict: overwrite.`,
    );
    expect(problem?.message).not.toContain(store.secretAccessKey);
    const overwrite = await openSinks(proxy.endpoint, ', on_conflict: overwrite');
    expect(await overwrite.preflight()).toBeUndefined();
    proxy.rules = {};
  });

  it('a store without conditional PUTs: a HEAD goes first even for a fresh file; other bytes are a conflict, nothing overwritten', async () => {
    const sink = await preflighted(store.endpoint);
    const theirs = randomBytes(50_000);
    await putOther('taken.png', theirs);
    const mine = randomBytes(60_000);
    const download = output('taken.png', mine);
    const { last, journal } = await upload(sink, download);
    expect(last).toEqual({
      type: 'sink_conflict',
      instance: 'taken',
      output: 0,
      bucket: BUCKET,
      key: keyOf('taken.png'),
      sha256: download.sha256,
      size: mine.length,
      action: 'failed',
      existingSize: theirs.length,
      existingEtag: md5(theirs),
    });
    expect(journal).toEqual([last]);
    expect(JournalRecord.safeParse(last).success).toBe(true);
    expect(await storedBytes('taken.png')).toEqual(theirs);

    // The journal keeps it to do (a resume looks again) and names the key as a conflict.
    const state = emptyRunState();
    applyRecord(state, download);
    applyRecord(state, last);
    const entry = state.instances.get('taken')!;
    expect(pendingSinkUploads(entry)).toHaveLength(1);
    expect(sinkConflicts(entry).map((r) => [r.key, r.action])).toEqual([[keyOf('taken.png'), 'failed']]);

    // uploadPending returns it typed, beside what went.
    const result = await sink.uploadPending(runDir, 'taken', entry, fresh, async () => undefined);
    expect(result).toEqual({
      uploaded: 0,
      bytes: 0,
      failed: undefined,
      conflicts: [{ key: keyOf('taken.png'), output: 0, action: 'failed' }],
      unverified: [],
    });
  });

  it('the same bytes already at the key (another run, or this one before a crash) count as delivered', async () => {
    const sink = await preflighted(store.endpoint);
    const bytes = randomBytes(40_000);
    await putOther('same.png', bytes, { sha256: sha256(bytes) });
    const { last } = await upload(sink, output('same.png', bytes));
    expect(last).toMatchObject({ type: 'sink_uploaded', key: keyOf('same.png'), skipped: true, etag: md5(bytes) });
  });

  it('a store with conditional PUTs: the PUT carries If-None-Match: *, its 412 is looked into, and other bytes are a conflict', async () => {
    proxy.rules = { conditional: true };
    const sink = await preflighted(proxy.endpoint);
    const theirs = randomBytes(30_000);
    await putOther('cond.png', theirs);
    const before = proxy.seen.length;
    const { last } = await upload(sink, output('cond.png', randomBytes(31_000)));
    expect(last).toMatchObject({ type: 'sink_conflict', key: keyOf('cond.png'), action: 'failed', existingSize: theirs.length });
    expect(await storedBytes('cond.png')).toEqual(theirs);
    const sent = proxy.seen.slice(before).filter((r) => r.url.includes('cond.png'));
    // No HEAD before the PUT (the store's own condition protects), one after its 412.
    expect(sent.map((r) => r.method)).toEqual(['PUT', 'HEAD']);
    expect(sent[0]?.headers['if-none-match']).toBe('*');

    // A free key: one conditional PUT, verified, nothing else.
    const fresh2 = randomBytes(20_000);
    const mark = proxy.seen.length;
    const { last: ok } = await upload(sink, output('cond-free.png', fresh2));
    expect(ok).toMatchObject({ type: 'sink_uploaded', key: keyOf('cond-free.png'), etag: md5(fresh2) });
    expect(proxy.seen.slice(mark).map((r) => r.method)).toEqual(['PUT']);
    proxy.rules = {};
  });

  it('on_conflict: skip leaves the object for good; on_conflict: overwrite replaces it, journaled first', async () => {
    const theirs = randomBytes(10_000);
    await putOther('skip.png', theirs);
    const skip = await preflighted(store.endpoint, ', on_conflict: skip');
    const download = output('skip.png', randomBytes(11_000));
    const { last } = await upload(skip, download);
    expect(last).toMatchObject({ type: 'sink_conflict', action: 'skipped' });
    expect(await storedBytes('skip.png')).toEqual(theirs);
    const state = emptyRunState();
    applyRecord(state, download);
    applyRecord(state, last as SinkRecord);
    expect(pendingSinkUploads(state.instances.get('skip')!)).toEqual([]);

    await putOther('over.png', theirs, { sha256: sha256(theirs) });
    const overwrite = await preflighted(store.endpoint, ', on_conflict: overwrite');
    const mine = randomBytes(12_000);
    const { last: done, journal } = await upload(overwrite, output('over.png', mine));
    expect(journal.map((r) => r.type)).toEqual(['sink_overwrite', 'sink_uploaded']);
    expect(journal[0]).toEqual({
      type: 'sink_overwrite',
      instance: 'over',
      output: 0,
      bucket: BUCKET,
      key: keyOf('over.png'),
      sha256: sha256(mine),
      previousSize: theirs.length,
      previousEtag: md5(theirs),
      previousSha256: sha256(theirs),
      reason: 'on_conflict',
    });
    expect(JournalRecord.safeParse(journal[0]).success).toBe(true);
    expect(done).toMatchObject({ type: 'sink_uploaded', etag: md5(mine) });
    expect(await storedBytes('over.png')).toEqual(mine);
  });
});
