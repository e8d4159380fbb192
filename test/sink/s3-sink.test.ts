// Storage sinks against a real S3-compatible store on 127.0.0.1: verified
// uploads, multipart above 16 MB, the preflight's refusals, a store killed mid-upload and restarted,
// no second upload of an object already there, and no secret in any error or record.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { GetObjectCommand, HeadObjectCommand, type ServiceInputTypes, type ServiceOutputTypes } from '@aws-sdk/client-s3';
import type { FinalizeRequestMiddleware } from '@smithy/types';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenpipeError } from '../../src/api/errors.js';
import { redact } from '../../src/util/redact.js';
import { loadManifestText } from '../../src/manifest/load.js';
import type { JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { JournalRecord } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, pendingSinkUploads, type InstanceState } from '../../src/run/journal/run-state.js';
import { sinkTotals } from '../../src/sink/sink-totals.js';
import { RunSinks, type SinkRecord, type StepSink } from '../../src/sink/run-sinks.js';
import { SinkUploadError } from '../../src/sink/sink-errors.js';
import { MULTIPART_THRESHOLD } from '../../src/sink/s3-store.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

const BUCKET = 'genpipe-sink';
const RUN = { id: '20261127T030000Z-ab12', startedAt: new Date('2026-11-27T03:00:00.000Z') };

let store: LoopbackS3;
let restoreEnv: () => void;
const runDir = mkdtempSync(join(tmpdir(), 'genpipe-sink-run-'));
const opened: RunSinks[] = [];

beforeAll(async () => {
  store = await startLoopbackS3({ buckets: [BUCKET] });
  restoreEnv = useStoreCredentials(store);
});
afterAll(async () => {
  for (const sinks of opened) sinks.close();
  restoreEnv();
  await store.stop();
});

function manifest(sink: string): string {
  return `version: 1\nname: t\nvars:\n  campaign: spring\ndefaults:\n  output:\n    sink: ${sink}\nsteps:\n  sheets:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: a cat\n`;
}

async function openSinks(
  sink = `{url: "s3://${BUCKET}/{{ vars.campaign }}/{{ run.date }}", endpoint: "${store.endpoint}", concurrency: 4}`,
): Promise<RunSinks> {
  const sinks = await RunSinks.open(loadManifestText(manifest(sink), 'm.yaml'), RUN);
  if (!sinks) throw new Error('expected sinks');
  opened.push(sinks);
  return sinks;
}

/** An output file in the run directory, and its `downloaded` record. */
function output(name: string, bytes: Buffer, index = 0): JournalRecordOf<'downloaded'> {
  const path = `outputs/sheets/${name}`;
  mkdirSync(join(runDir, 'outputs/sheets'), { recursive: true });
  writeFileSync(join(runDir, path), bytes);
  return {
    type: 'downloaded',
    instance: name.replace(/\..*$/, ''),
    output: index,
    path,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    size: bytes.length,
  };
}

/** Every request the SDK client sends, with its operation and headers, as it leaves (after signing). */
function watch(sink: StepSink): { sent: { operation: string; headers: Record<string, string> }[]; stop: () => void } {
  const sent: { operation: string; headers: Record<string, string> }[] = [];
  const name = `watch-${sent.length}-${Math.random()}`;
  const middleware: FinalizeRequestMiddleware<ServiceInputTypes, ServiceOutputTypes> = (next, context) => async (args) => {
    sent.push({
      operation: String((context as { commandName?: string }).commandName),
      headers: { ...(args.request as { headers: Record<string, string> }).headers },
    });
    return next(args);
  };
  sink.store.client.middlewareStack.add(middleware, { step: 'finalizeRequest', name, priority: 'low' });
  return { sent, stop: () => sink.store.client.middlewareStack.remove(name) };
}

async function objectBytes(sink: StepSink, key: string): Promise<Buffer> {
  const got = await sink.store.client.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
  return Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
}

const noRetries = { consumeRetry: () => false };

describe('a storage sink on a real S3-compatible store', () => {
  it('passes the preflight, and uploads a file under PREFIX/<path under outputs> with its SHA-256 checksum', async () => {
    const sinks = await openSinks();
    expect(await sinks.preflight()).toBeUndefined();
    // The secret key the SDK's chain gave is registered: no log, journal or report line can carry it.
    expect(redact(`key ${store.secretAccessKey}`)).toBe('key [REDACTED]');
    const sink = sinks.forStep('sheets') as StepSink;
    const bytes = randomBytes(200_000);
    const download = output('cat.png', bytes);
    const seen = watch(sink);
    const record = await sink.uploadOutput(runDir, 'cat', download, noRetries);
    seen.stop();

    expect(record).toMatchObject({
      type: 'sink_uploaded',
      instance: 'cat',
      output: 0,
      bucket: BUCKET,
      key: 'spring/2026-11-27/sheets/cat.png',
      size: bytes.length,
      sha256: download.sha256,
    });
    expect(record.etag).toMatch(/^[0-9a-f]{32}$/);
    expect(JournalRecord.safeParse(record).success).toBe(true);
    expect(sink.uri(download.path)).toBe(`s3://${BUCKET}/spring/2026-11-27/sheets/cat.png`);
    // The checksum goes out with the object (a real store refuses the object when it does not match).
    const put = seen.sent.find((r) => r.operation === 'PutObjectCommand');
    expect(put?.headers['x-amz-checksum-sha256']).toBe(Buffer.from(download.sha256, 'hex').toString('base64'));
    // What the store holds is the file, byte for byte, and says so in its metadata.
    expect((await objectBytes(sink, record.key)).equals(bytes)).toBe(true);
    const head = await sink.store.client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: record.key }));
    expect(head.Metadata?.sha256).toBe(download.sha256);
    expect(head.ContentType).toBe('image/png');
  });

  it('uploads a file over 16 MB as a multipart upload whose parts carry their checksums', async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const bytes = randomBytes(MULTIPART_THRESHOLD + 1024 * 1024);
    const download = output('big.mp4', bytes);
    const seen = watch(sink);
    const record = await sink.uploadOutput(runDir, 'big', download, noRetries);
    seen.stop();

    const parts = seen.sent.filter((r) => r.operation === 'UploadPartCommand');
    expect(seen.sent.map((r) => r.operation)).toContain('CreateMultipartUploadCommand');
    expect(seen.sent.map((r) => r.operation)).toContain('CompleteMultipartUploadCommand');
    expect(parts.length).toBe(3);
    for (const part of parts) expect(part.headers['x-amz-checksum-sha256']).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(record).toMatchObject({ size: bytes.length, sha256: download.sha256 });
    expect((await objectBytes(sink, record.key)).equals(bytes)).toBe(true);
  });

  it('does not upload again an object that is already there with the same SHA-256; a changed file is uploaded', async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const download = output('again.png', randomBytes(50_000));
    const first = (await sink.uploadOutput(runDir, 'again', download, noRetries)) as JournalRecordOf<'sink_uploaded'>;
    expect(first.skipped).toBeUndefined();

    const seen = watch(sink);
    const second = await sink.uploadOutput(runDir, 'again', download, noRetries);
    expect(second).toMatchObject({ skipped: true, key: first.key, sha256: first.sha256, etag: first.etag });
    expect(seen.sent.map((r) => r.operation)).toEqual(['HeadObjectCommand']);

    // Told the file is new (a fresh run's download), it still looks first: this store's PUTs are
    // not conditional, and only the HEAD keeps another run's object from being replaced.
    const fresh = output('fresh.png', randomBytes(1000));
    const sentBefore = seen.sent.length;
    await sink.uploadOutput(runDir, 'fresh', fresh, { ...noRetries, checkExisting: false });
    expect(seen.sent.slice(sentBefore).map((r) => r.operation)).toEqual(['HeadObjectCommand', 'PutObjectCommand']);
    seen.sent.splice(sentBefore);

    // New bytes under the same name (the instance made again): the object genpipe wrote for it is
    // replaced, journaled; an object it did not write is not.
    const remade = output('again.png', randomBytes(50_000));
    const journal: SinkRecord[] = [];
    const third = await sink.uploadOutput(
      runDir,
      'again',
      remade,
      { ...noRetries, ownObject: { sha256: first.sha256, etag: first.etag } },
      async (record) => {
        journal.push(record);
      },
    );
    seen.stop();
    expect(journal.map((r) => [r.type, r.type === 'sink_overwrite' ? r.reason : undefined])).toEqual([
      ['sink_overwrite', 'remade'],
      ['sink_uploaded', undefined],
    ]);
    expect(third).toMatchObject({ type: 'sink_uploaded' });
    expect((third as JournalRecordOf<'sink_uploaded'>).skipped).toBeUndefined();
    expect(seen.sent.map((r) => r.operation)).toEqual(['HeadObjectCommand', 'HeadObjectCommand', 'PutObjectCommand']);
    expect(
      createHash('sha256')
        .update(await objectBytes(sink, third.key))
        .digest('hex'),
    ).toBe(remade.sha256);
    const notOwn = output('again.png', randomBytes(50_000));
    expect(
      await sink.uploadOutput(runDir, 'again', notOwn, { ...noRetries, ownObject: { sha256: first.sha256, etag: first.etag } }),
    ).toMatchObject({
      type: 'sink_conflict',
      action: 'failed',
    });
  });

  it('refuses, in one sentence, a file that changed after it was downloaded', async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const download = output('edited.png', randomBytes(1000));
    writeFileSync(join(runDir, download.path), randomBytes(1000));
    const error = await sink.uploadOutput(runDir, 'edited', download, noRetries).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SinkUploadError);
    expect((error as SinkUploadError).transient).toBe(false);
    expect((error as Error).message).toMatch(
      /changed after it was downloaded .*was not uploaded to s3:\/\/genpipe-sink\/spring\/2026-11-27\.$/,
    );
  });

  it('the preflight refuses a missing bucket, a key the store does not know and a store that does not answer, each in one sentence without a secret', async () => {
    const missing = await (await openSinks(`{url: "s3://no-such-bucket/x", endpoint: "${store.endpoint}"}`)).preflight();
    expect(missing).toBeInstanceOf(GenpipeError);
    expect(missing?.code).toBe('config');
    expect(missing?.message).toBe(
      `The bucket no-such-bucket of the sink s3://no-such-bucket/x does not exist at ${store.endpoint}; create it, or fix the sink's URL or endpoint.`,
    );

    const wrongSecret = `wrong-secret-${randomBytes(8).toString('hex')}`;
    const undo = useStoreCredentials(store, { accessKeyId: 'NOSUCHKEY', secretAccessKey: wrongSecret });
    let refused: GenpipeError | undefined;
    try {
      refused = await (await openSinks()).preflight();
    } finally {
      undo();
    }
    expect(refused?.code).toBe('credentials');
    expect(refused?.message).toMatch(
      /^The store refused to let these credentials write to s3:\/\/genpipe-sink\/spring\/2026-11-27 \(InvalidAccessKeyId, HTTP 403\): check AWS_ACCESS_KEY_ID/,
    );
    for (const text of [refused?.message, inspect(refused), missing?.message]) {
      expect(text).not.toContain(wrongSecret);
      expect(text).not.toContain(store.secretAccessKey);
    }
    // A store that does not answer at all (a port nothing listens on).
    const closed = await freePort();
    const unreachable = await (await openSinks(`{url: "s3://${BUCKET}/x", endpoint: "http://127.0.0.1:${closed}"}`)).preflight();
    expect(unreachable?.code).toBe('config');
    expect(unreachable?.message).toBe(
      `The sink s3://${BUCKET}/x could not be checked at http://127.0.0.1:${closed} (ECONNREFUSED); nothing was sent to the generation service.`,
    );
    // The probe object was removed: the bucket holds only what the other tests uploaded.
    expect(await probesLeft()).toEqual([]);
  });

  it('a store that accepts connections and never answers: the preflight gives up in one sentence, and an upload fails as transient once the store has said nothing for the idle limit', async () => {
    const { createServer } = await import('node:net');
    const held: import('node:net').Socket[] = [];
    const silent = createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const endpoint = `http://127.0.0.1:${(silent.address() as import('node:net').AddressInfo).port}`;
    const before = process.env.GENPIPE_SINK_IDLE_MS;
    process.env.GENPIPE_SINK_IDLE_MS = '300';
    try {
      const sinks = await openSinks(`{url: "s3://${BUCKET}/x", endpoint: "${endpoint}"}`);
      const started = Date.now();
      const problem = await sinks.preflight();
      // 3 attempts of at most 150 ms each (half the idle limit), and the backoff between them: bounded, not forever.
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(problem?.code).toBe('config');
      expect(problem?.message).toBe(
        `The sink s3://${BUCKET}/x could not be checked at ${endpoint} (ETIMEDOUT); nothing was sent to the generation service.`,
      );
      expect(held.length).toBe(3);

      const sink = sinks.forStep('sheets') as StepSink;
      const download = output('silent.png', randomBytes(1_000));
      let asked = 0;
      const error = await sink.uploadOutput(runDir, 'silent', download, { consumeRetry: () => ++asked <= 1, random: () => 0 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(asked).toBe(2);
      expect(error).toBeInstanceOf(SinkUploadError);
      expect((error as SinkUploadError).transient).toBe(true);
      expect((error as Error).message).toBe(
        `The upload of x/sheets/silent.png to s3://${BUCKET}/x kept failing (TimeoutError); the file is kept and a resume uploads it.`,
      );

      // Ctrl-C during the preflight ends it at once, not after the store's timeouts (20 s each here).
      process.env.GENPIPE_SINK_IDLE_MS = '60000';
      const patient = await openSinks(`{url: "s3://${BUCKET}/y", endpoint: "${endpoint}"}`);
      const stop = new AbortController();
      setTimeout(() => stop.abort(), 300);
      const stoppedAt = Date.now();
      const interrupted = await patient.preflight(stop.signal).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(Date.now() - stoppedAt).toBeLessThan(5_000);
      expect(interrupted).toBeInstanceOf(GenpipeError);
      expect((interrupted as GenpipeError).code).toBe('aborted');
    } finally {
      if (before === undefined) delete process.env.GENPIPE_SINK_IDLE_MS;
      else process.env.GENPIPE_SINK_IDLE_MS = before;
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('a store killed mid-upload and started again: the upload is retried under the budget and completes, verified', async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const bytes = randomBytes(MULTIPART_THRESHOLD + 2 * 1024 * 1024);
    const download = output('crash.mp4', bytes);
    // The store dies as the second part is about to go (the upload created, parts on the way): that
    // request and those in flight fail. Requests made while it starts again wait for it, as a client
    // with a long connect timeout would, so the test does not depend on how fast it comes back.
    let parts = 0;
    let killed = false;
    let back: Promise<void> | undefined;
    const name = 'kill-mid-upload';
    const middleware: FinalizeRequestMiddleware<ServiceInputTypes, ServiceOutputTypes> = (next, context) => async (args) => {
      if ((context as { commandName?: string }).commandName === 'UploadPartCommand' && ++parts === 2 && !killed) {
        killed = true;
        await store.kill();
        back = store.restart();
        try {
          return await next(args);
        } finally {
          await back;
        }
      }
      await back;
      return next(args);
    };
    sink.store.client.middlewareStack.add(middleware, { step: 'finalizeRequest', name, priority: 'low' });
    let retries = 0;
    let credits = 0;
    const record = await sink.uploadOutput(runDir, 'crash', download, {
      consumeRetry: () => (retries++, true),
      creditRetry: () => void credits++,
      random: () => 0,
    });
    sink.store.client.middlewareStack.remove(name);

    expect(killed).toBe(true);
    expect(retries).toBeGreaterThanOrEqual(1);
    expect(credits).toBe(1);
    expect(record).toMatchObject({ size: bytes.length, sha256: download.sha256 });
    expect(
      createHash('sha256')
        .update(await objectBytes(sink, record.key))
        .digest('hex'),
    ).toBe(download.sha256);
  });

  it('a store that stays down leaves the upload pending once the budget says no, and a later upload (a resume) completes it', async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const download = output('pending.png', randomBytes(30_000));
    const state = emptyRunState();
    applyRecord(state, download);
    await store.kill();
    let asked = 0;
    let error: unknown;
    try {
      await sink.uploadOutput(runDir, 'pending', download, { consumeRetry: () => ++asked <= 2, random: () => 0 });
    } catch (e) {
      error = e;
    } finally {
      await store.restart();
    }
    expect(asked).toBe(3);
    expect(error).toBeInstanceOf(SinkUploadError);
    expect((error as SinkUploadError).transient).toBe(true);
    expect((error as SinkUploadError).code).toBe('network');
    expect((error as Error).message).toBe(
      `The upload of spring/2026-11-27/sheets/pending.png to s3://${BUCKET}/spring/2026-11-27 kept failing (ECONNREFUSED); the file is kept and a resume uploads it.`,
    );
    expect(inspect(error)).not.toContain(store.secretAccessKey);
    expect(pendingSinkUploads(state.instances.get('pending') as never)).toEqual([download]);

    // The resume's upload, journaled: nothing is pending any more.
    const record = await sink.uploadOutput(runDir, 'pending', download, noRetries);
    applyRecord(state, record);
    expect(pendingSinkUploads(state.instances.get('pending') as never)).toEqual([]);
    expect(JSON.stringify(record)).not.toContain(store.secretAccessKey);
  });

  it("uploadPending sends an instance's pending outputs and journals each; a second resume sends nothing", async () => {
    const sink = (await openSinks()).forStep('sheets') as StepSink;
    const state = emptyRunState();
    const downloads = [
      output('multi+0.png', randomBytes(20_000), 0),
      output('multi+1.png', randomBytes(20_000), 1),
      output('multi+2.png', randomBytes(20_000), 2),
    ].map((d) => ({ ...d, instance: 'multi' }));
    for (const d of downloads) applyRecord(state, d);
    // The first was uploaded before a crash: its record is in the journal.
    applyRecord(state, await sink.uploadOutput(runDir, 'multi', downloads[0] as JournalRecordOf<'downloaded'>, noRetries));
    const entry = state.instances.get('multi') as InstanceState;
    expect(sinkTotals([entry])).toEqual({
      uploadedFiles: 1,
      uploadedBytes: 20_000,
      pendingFiles: 2,
      pendingBytes: 40_000,
      pendingInstances: 1,
      conflictFiles: 0,
      skippedFiles: 0,
      unverifiedFiles: 0,
      conflicts: [],
      unverified: [],
    });

    const journal: SinkRecord[] = [];
    const seen = watch(sink);
    const first = await sink.uploadPending(runDir, 'multi', entry, noRetries, async (record) => {
      journal.push(record);
      applyRecord(state, record);
    });
    expect(first).toEqual({ uploaded: 2, bytes: 40_000, failed: undefined, conflicts: [], unverified: [] });
    expect(journal.map((r) => r.output).sort()).toEqual([1, 2]);
    expect(seen.sent.filter((r) => r.operation === 'PutObjectCommand')).toHaveLength(2);
    expect(sinkTotals([entry])).toMatchObject({ uploadedFiles: 3, pendingFiles: 0, pendingInstances: 0 });

    const again = await sink.uploadPending(runDir, 'multi', entry, noRetries, async () => {
      throw new Error('nothing should be journaled');
    });
    seen.stop();
    expect(again).toEqual({ uploaded: 0, bytes: 0, failed: undefined, conflicts: [], unverified: [] });
    expect(seen.sent).toHaveLength(2 * 2);
  });
});

/** A port nothing listens on: one the system just gave and took back. */
async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Probe objects (`.genpipe-probe-*`) left in the store's directory. */
async function probesLeft(): Promise<string[]> {
  const { readdir } = await import('node:fs/promises');
  const found: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) await walk(join(dir, entry.name));
      else if (entry.name.includes('.genpipe-probe-')) found.push(entry.name);
    }
  };
  await walk(store.directory);
  return found;
}
