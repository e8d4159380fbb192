// A multipart upload killed midway is resumed, not left in the store: a 40 MB file uploaded by a
// child process (multipart-child.mjs, the built sink code) SIGKILLed three times between parts,
// each next process completing the same upload from the journaled upload id and parts. A real
// s3rver on 127.0.0.1 behind a front that holds each part a moment (s3-proxy.ts); s3rver has no
// ListParts nor AbortMultipartUpload, so what is left behind is read from its data folder.
// Needs `npm run build` (the child imports dist/).
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JournalRecord } from '../../src/run/journal/journal-records.js';
import { startS3Proxy, type S3Proxy } from './s3-proxy.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

const BUCKET = 'genpipe-resume';
const CHILD = fileURLToPath(new URL('./multipart-child.mjs', import.meta.url));
const SIZE = 40 * 1024 * 1024;

let store: LoopbackS3;
let proxy: S3Proxy;
let restoreEnv: () => void;

beforeAll(async () => {
  store = await startLoopbackS3({ buckets: [BUCKET] });
  proxy = await startS3Proxy(store, { partDelayMs: 250 });
  restoreEnv = useStoreCredentials(store);
});
afterAll(async () => {
  restoreEnv();
  await proxy.stop();
  await store.stop();
});

/** The upload folders s3rver keeps for multipart uploads not completed (its parts live there). */
function uploadsLeft(): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      if (entry.name.endsWith('._S3rver_uploads')) {
        for (const id of readdirSync(join(dir, entry.name))) found.push(id);
      } else walk(join(dir, entry.name));
    }
  };
  walk(store.directory);
  return found;
}

const records = (journal: string): { type: string; [k: string]: unknown }[] =>
  readFileSync(journal, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as { type: string });

/** Runs the child; with `killAfterParts`, SIGKILLs it once the journal holds that many parts. */
async function child(args: string[], journal: string, killAfterParts?: number): Promise<{ killed: boolean; out: string }> {
  const proc = spawn(process.execPath, [CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: process.env });
  let out = '';
  proc.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  proc.stderr.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let killed = false;
  if (killAfterParts !== undefined) {
    const deadline = Date.now() + 30_000;
    while (proc.exitCode === null && Date.now() < deadline) {
      if (records(journal).filter((r) => r.type === 'sink_part').length >= killAfterParts) {
        proc.kill('SIGKILL');
        killed = true;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }
  await exited;
  return { killed, out };
}

describe('a multipart upload killed midway', () => {
  it('is resumed three times from the journal and completes the same upload, leaving no parts behind', async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'genpipe-resume-run-'));
    mkdirSync(join(runDir, 'outputs/clips'), { recursive: true });
    const bytes = randomBytes(SIZE);
    writeFileSync(join(runDir, 'outputs/clips/film.mp4'), bytes);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const journal = join(runDir, 'journal.jsonl');
    writeFileSync(
      journal,
      `${JSON.stringify({ type: 'downloaded', instance: 'film', output: 0, path: 'outputs/clips/film.mp4', sha256, size: SIZE })}\n`,
    );
    const manifest = join(runDir, 'm.yaml');
    writeFileSync(
      manifest,
      `version: 1\nname: t\ndefaults:\n  output:\n    sink: {url: "s3://${BUCKET}/{{ run.id }}", endpoint: "${proxy.endpoint}"}\nsteps:\n  clips:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: a cat\n`,
    );
    const args = [manifest, runDir, journal, 'film'];

    /** The part numbers a process sent, from the proxy's log since `from`. */
    const partsSent = (from: number): number[] =>
      proxy.seen
        .slice(from)
        .filter((r) => r.method === 'PUT' && r.url.includes('partNumber'))
        .map((r) => Number(new URL(r.url, 'http://x').searchParams.get('partNumber')));
    /** The part numbers the journal holds so far. */
    const journaledParts = (): Set<number> =>
      new Set(
        records(journal)
          .filter((r) => r.type === 'sink_part')
          .map((r) => r.part as number),
      );
    /** Runs a process and checks it sent no part an earlier one journaled. */
    const resumeOnce = async (killAfterParts?: number): Promise<{ killed: boolean; out: string }> => {
      const before = journaledParts();
      const from = proxy.seen.length;
      const ran = await child(args, journal, killAfterParts);
      const again = partsSent(from).filter((n) => before.has(n));
      expect(again, `parts journaled before this process and sent again: ${again.join(', ')}`).toEqual([]);
      return ran;
    };

    for (const parts of [1, 2, 3]) {
      const { killed, out } = await resumeOnce(parts);
      expect(killed, out).toBe(true);
      // Killed midway: the upload is in the store, unfinished, and its id in the journal.
      expect(uploadsLeft()).toHaveLength(1);
    }
    const started = records(journal).filter((r) => r.type === 'sink_multipart');
    expect(started).toHaveLength(1);
    const uploadId = started[0]?.uploadId;
    expect(uploadsLeft()).toEqual([uploadId]);

    const journaledBeforeLast = journaledParts().size;
    const seenBeforeLast = proxy.seen.length;
    const last = await resumeOnce();
    // The last process sent exactly the parts not journaled yet.
    expect(partsSent(seenBeforeLast)).toHaveLength(5 - journaledBeforeLast);
    expect(JSON.parse(last.out.trim().split('\n').pop() as string)).toEqual({ uploaded: 1, failed: null });
    const all = records(journal);
    for (const record of all) expect(JournalRecord.safeParse(record).success).toBe(true);
    // One upload, begun once and completed by the fourth process: parts 1 to 5, each journaled.
    expect(all.filter((r) => r.type === 'sink_multipart')).toHaveLength(1);
    const parts = all.filter((r) => r.type === 'sink_part');
    expect(new Set(parts.map((r) => r.part))).toEqual(new Set([1, 2, 3, 4, 5]));
    expect(parts.every((r) => r.uploadId === uploadId)).toBe(true);
    expect(all.filter((r) => r.type === 'sink_multipart_aborted')).toEqual([]);
    expect(all.at(-1)).toMatchObject({ type: 'sink_uploaded', key: 'run-1/clips/film.mp4', sha256, size: SIZE });
    // Parts journaled before a kill were not sent again: at most those in flight at each kill (four at once) were.
    const partPuts = proxy.seen.filter((r) => r.method === 'PUT' && r.url.includes('partNumber'));
    expect(partPuts.length).toBeLessThanOrEqual(5 + 3 * 4);
    expect(new Set(partPuts.map((r) => new URL(r.url, 'http://x').searchParams.get('uploadId')))).toEqual(new Set([uploadId]));

    // Nothing left behind, and the object is the file.
    expect(uploadsLeft()).toEqual([]);
    expect(existsSync(store.directory)).toBe(true);
    const direct = new S3Client({ endpoint: store.endpoint, forcePathStyle: true, region: 'us-east-1' });
    const got = await direct.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'run-1/clips/film.mp4' }));
    const stored = Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
    direct.destroy();
    expect(createHash('sha256').update(stored).digest('hex')).toBe(sha256);
  }, 120_000);
});
