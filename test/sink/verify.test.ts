// Uploads verified by genpipe itself, not by the store's goodwill: a real s3rver on 127.0.0.1 with
// a small front (s3-proxy.ts) that keeps other bytes than it was sent, forges ETags, or gives none
// that is an MD5. The ETag is checked where it is an MD5, each part and the composite for a
// multipart upload, else the object is read back, else the upload is journaled "unverified".
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifestText } from '../../src/manifest/load.js';
import { JournalRecord, type JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, sinkUnverified } from '../../src/run/journal/run-state.js';
import { RunSinks, type SinkRecord, type StepSink } from '../../src/sink/run-sinks.js';
import { SinkUploadError } from '../../src/sink/sink-errors.js';
import { MULTIPART_THRESHOLD } from '../../src/sink/s3-store.js';
import { startS3Proxy, type S3Proxy } from './s3-proxy.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

const BUCKET = 'genpipe-verify';
const RUN = { id: '20261202T030000Z-cd34', startedAt: new Date('2026-12-02T03:00:00.000Z') };

let store: LoopbackS3;
let proxy: S3Proxy;
let direct: S3Client;
let restoreEnv: () => void;
const runDir = mkdtempSync(join(tmpdir(), 'genpipe-verify-run-'));
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

/** The step's sink through the proxy, with the long form's extra fields (`read_back: never`...). */
async function sinkThroughProxy(extra: string): Promise<StepSink> {
  const text = `version: 1\nname: t\ndefaults:\n  output:\n    sink: {url: "s3://${BUCKET}/{{ run.id }}", endpoint: "${proxy.endpoint}"${extra}}\nsteps:\n  sheets:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: a cat\n`;
  const sinks = await RunSinks.open(loadManifestText(text, 'm.yaml'), RUN);
  if (!sinks) throw new Error('expected sinks');
  opened.push(sinks);
  return sinks.forStep('sheets') as StepSink;
}

function output(name: string, bytes: Buffer): JournalRecordOf<'downloaded'> {
  const path = `outputs/sheets/${name}`;
  mkdirSync(join(runDir, 'outputs/sheets'), { recursive: true });
  writeFileSync(join(runDir, path), bytes);
  return { type: 'downloaded', instance: name.replace(/\..*$/, ''), output: 0, path, sha256: sha256(bytes), size: bytes.length };
}

const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');
const noRetries = { consumeRetry: () => false };
const keyOf = (name: string): string => `${RUN.id}/sheets/${name}`;

async function storedBytes(key: string): Promise<Buffer | undefined> {
  try {
    const got = await direct.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    return Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
  } catch {
    return undefined;
  }
}

/** Uploads and returns what it threw (or undefined) and the records it journaled. */
async function attempt(sink: StepSink, download: JournalRecordOf<'downloaded'>): Promise<{ error: unknown; journal: SinkRecord[] }> {
  const journal: SinkRecord[] = [];
  try {
    await sink.uploadOutput(runDir, download.instance, download, noRetries, async (record) => {
      journal.push(record);
    });
    return { error: undefined, journal };
  } catch (error) {
    return { error, journal };
  }
}

describe('uploads verified independently of the store', () => {
  it('a store that keeps a flipped byte and answers its own ETag: the MD5 check catches it, nothing is journaled and the damaged object is removed', async () => {
    proxy.rules = { flipByte: true };
    const sink = await sinkThroughProxy(', read_back: never');
    const bytes = randomBytes(300_000);
    const { error, journal } = await attempt(sink, output('flip-etag.png', bytes));
    expect(error).toBeInstanceOf(SinkUploadError);
    expect((error as SinkUploadError).transient).toBe(true);
    expect((error as Error).message).toContain("the store's ETag for the object is not the file's MD5");
    expect(journal).toEqual([]);
    // The damaged copy was genpipe's own, just written: it is not left to pass for the file.
    expect(await storedBytes(keyOf('flip-etag.png'))).toBeUndefined();

    // The same store, honest again: the upload goes, verified by its ETag.
    proxy.rules = {};
    const again = await attempt(sink, output('flip-etag.png', bytes));
    expect(again.error).toBeUndefined();
    expect(again.journal.map((r) => r.type)).toEqual(['sink_uploaded']);
    expect(await storedBytes(keyOf('flip-etag.png'))).toEqual(bytes);
  });

  it('a store that keeps a flipped byte and forges the MD5 the sender expects: only the read-back catches it', async () => {
    proxy.rules = { flipByte: true, forgeEtag: true };
    const bytes = randomBytes(250_000);
    const download = output('flip-forged.png', bytes);
    // The ETag alone is fooled (what the store answers is the file's MD5), as a store's checksum is:
    // the sink that does not read back journals the upload as done.
    const fooled = await attempt(await sinkThroughProxy(', read_back: when_needed'), download);
    expect(fooled.error).toBeUndefined();
    expect(await storedBytes(keyOf('flip-forged.png'))).not.toEqual(bytes);

    const sink = await sinkThroughProxy(', read_back: always');
    const download2 = output('flip-forged-2.png', bytes);
    const { error, journal } = await attempt(sink, download2);
    expect(error).toBeInstanceOf(SinkUploadError);
    expect((error as Error).message).toContain('the object read back is not the file');
    expect(journal).toEqual([]);
    expect(await storedBytes(keyOf('flip-forged-2.png'))).toBeUndefined();
  });

  it('a store whose ETags are no MD5: read back when needed (verified, or caught), else journaled unverified', async () => {
    proxy.rules = { opaqueEtag: true };
    const bytes = randomBytes(120_000);
    const read = await attempt(await sinkThroughProxy(''), output('opaque-read.png', bytes));
    expect(read.error).toBeUndefined();
    expect(read.journal.map((r) => r.type)).toEqual(['sink_uploaded']);
    const gets = proxy.seen.filter((r) => r.method === 'GET' && r.url.includes('opaque-read.png'));
    expect(gets).toHaveLength(1);

    // Over the read-back limit, or told never to read back: journaled unverified, with the reason.
    const download = output('opaque-unverified.png', bytes);
    const unverified = await attempt(await sinkThroughProxy(', read_back_max_bytes: 1000'), download);
    expect(unverified.error).toBeUndefined();
    expect(unverified.journal.map((r) => r.type)).toEqual(['sink_uploaded', 'sink_unverified']);
    const record = unverified.journal[1] as JournalRecordOf<'sink_unverified'>;
    expect(record).toMatchObject({
      instance: 'opaque-unverified',
      output: 0,
      bucket: BUCKET,
      key: keyOf('opaque-unverified.png'),
      sha256: download.sha256,
    });
    expect(record.reason).toBe('the store gave no MD5 ETag and the file is over the read-back limit of 1000 bytes');
    expect(JournalRecord.safeParse(record).success).toBe(true);
    const state = emptyRunState();
    applyRecord(state, download);
    for (const r of unverified.journal) applyRecord(state, r);
    expect(sinkUnverified(state.instances.get('opaque-unverified')!).map((r) => r.key)).toEqual([keyOf('opaque-unverified.png')]);

    // A flipped byte behind opaque ETags: the read-back catches it.
    proxy.rules = { opaqueEtag: true, flipByte: true };
    const caught = await attempt(await sinkThroughProxy(''), output('opaque-flip.png', bytes));
    expect(caught.error).toBeInstanceOf(SinkUploadError);
    expect((caught.error as Error).message).toContain('the object read back is not the file');
  });

  it("a multipart upload: each part's ETag is checked, and the whole object's", async () => {
    proxy.rules = {};
    const bytes = randomBytes(MULTIPART_THRESHOLD + 3 * 1024 * 1024);
    const sink = await sinkThroughProxy(', read_back: never');
    const good = await attempt(sink, output('big-good.mp4', bytes));
    expect(good.error).toBeUndefined();
    expect(good.journal.map((r) => r.type)).toEqual(['sink_multipart', 'sink_part', 'sink_part', 'sink_part', 'sink_uploaded']);
    expect(proxy.seen.filter((r) => r.method === 'PUT' && r.url.includes('big-good.mp4') && r.url.includes('partNumber'))).toHaveLength(3);

    proxy.rules = { flipByte: true };
    const bad = await attempt(sink, output('big-flip.mp4', bytes));
    expect(bad.error).toBeInstanceOf(SinkUploadError);
    expect((bad.error as Error).message).toMatch(/the store's ETag for part [123] is not the file's MD5/);
    // The upload begun is aborted and said so: no resume completes it.
    expect(bad.journal.map((r) => r.type).filter((t) => t !== 'sink_part')).toEqual(['sink_multipart', 'sink_multipart_aborted']);
    expect(await storedBytes(keyOf('big-flip.mp4'))).toBeUndefined();
  }, 60_000);

  it('the skip-if-present check takes the same evidence: SHA-256 metadata and size alone do not make an object the file', async () => {
    proxy.rules = {};
    const bytes = randomBytes(90_000);
    const download = output('present.png', bytes);
    const other = Buffer.from(bytes);
    other[10] = (other[10] as number) ^ 1;
    // Same size, the file's SHA-256 in its metadata, other bytes: what a lying store leaves behind.
    await direct.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: keyOf('present.png'), Body: other, Metadata: { sha256: download.sha256 } }),
    );
    const sink = await sinkThroughProxy(', read_back: never');
    const { error, journal } = await attempt(sink, download);
    expect(error).toBeUndefined();
    // Not the file: another object at its key, left as it is.
    expect(journal.map((r) => r.type)).toEqual(['sink_conflict']);
    expect(await storedBytes(keyOf('present.png'))).toEqual(other);

    // The object with the file's bytes is skipped, verified by its ETag.
    await direct.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: keyOf('present.png'), Body: bytes, Metadata: { sha256: download.sha256 } }),
    );
    const again = await attempt(sink, download);
    expect(again.journal.map((r) => [r.type, (r as JournalRecordOf<'sink_uploaded'>).skipped])).toEqual([['sink_uploaded', true]]);
    const head = await direct.send(new HeadObjectCommand({ Bucket: BUCKET, Key: keyOf('present.png') }));
    expect(head.ETag).toBe(`"${createHash('md5').update(bytes).digest('hex')}"`);
  });
});
