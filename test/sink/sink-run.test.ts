// Storage sinks in a whole run, in process against a real emulator and a real
// S3-compatible store (s3rver) on 127.0.0.1: every output lands in the bucket with the bytes on
// disk and outputs.csv names it; a sink that cannot be written refuses the run before anything is
// spent (exit 2, zero requests); a store killed mid-run leaves the rest "completed, upload pending"
// (exit 1, files on disk), and a resume uploads them without a single request to the service; no
// file genpipe writes holds the store's secret.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { killAll, startWorkerProcess, type WorkerProcess } from '../fleet/fleet-helpers.js';
import { startTestRedis } from '../fleet/redis-server.js';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { readGallery } from '../gallery/read-gallery.js';
import { receiver } from '../notify/receiver.js';
import { findRunDir, journalOf, tempDir } from '../run/runner-helpers.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from './s3-server.js';

let emu: Emulator;
let store: LoopbackS3;
let undo: () => void;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.02, log: () => {} });
  store = await startLoopbackS3({ buckets: ['media'] });
  undo = useStoreCredentials(store);
});
afterAll(async () => {
  undo();
  await store.stop();
  await emu.close();
});

async function genpipe(...argv: string[]): Promise<{ code: number; output: string }> {
  const lines: string[] = [];
  const io: CliIO = {
    out: (t) => lines.push(t),
    write: async (t) => void lines.push(t),
    err: (t) => lines.push(t),
    env: { ...process.env, GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const code = await main(argv[0] === 'run' || argv[0] === 'resume' ? [...argv, '--quiet'] : argv, io);
  return { code, output: lines.join('\n') };
}

function sheets(dir: string, name: string, count: number, sink: string, notify?: string): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\n${notify ? `notify:\n  - url: ${notify}\n` : ''}defaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n  output:\n    sink: ${sink}\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );
  return path;
}

const sinkOf = (prefix: string, publicBase?: string): string =>
  `{ url: "s3://media/${prefix}", endpoint: "${store.endpoint}", path_style: true${publicBase ? `, public_base_url: "${publicBase}"` : ''} }`;

/** What report.json says of the run's sinks. */
const reportSink = (runDir: string): unknown => (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { sink?: unknown }).sink;

/** The bytes of every object under `prefix` in the store, by key (read through the SDK, as a user would). */
async function objects(prefix: string): Promise<Map<string, Buffer>> {
  const { S3Client, ListObjectsV2Command, GetObjectCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({ endpoint: store.endpoint, region: 'us-east-1', forcePathStyle: true });
  try {
    const listed = await client.send(new ListObjectsV2Command({ Bucket: 'media', Prefix: `${prefix}/` }));
    const found = new Map<string, Buffer>();
    for (const item of listed.Contents ?? []) {
      const got = await client.send(new GetObjectCommand({ Bucket: 'media', Key: item.Key }));
      found.set(
        item.Key as string,
        Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()),
      );
    }
    return found;
  } finally {
    client.destroy();
  }
}

/** Every file under the run directory, for the outputs' bytes and the secret check. */
function filesOf(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile());
}

const sha = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** The `sink_uploaded` records of the one run of `pipeline` under `out` so far (0 before its journal exists). */
function uploadsOf(out: string, pipeline: string): number {
  try {
    return journalOf(findRunDir(out, pipeline)).records.filter((r) => r.type === 'sink_uploaded').length;
  } catch {
    return 0;
  }
}

/** Waits (30 s at most) until that run has journaled `count` uploads. */
async function untilUploaded(out: string, pipeline: string, count: number): Promise<void> {
  const end = Date.now() + 30_000;
  // Bounded by the deadline.
  while (uploadsOf(out, pipeline) < count && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
}

/** Every run directory of `pipeline` under `out`, oldest first (run ids sort by start time). */
const runDirsOf = (out: string, pipeline: string): string[] =>
  readdirSync(join(out, pipeline))
    .filter((n) => !n.startsWith('.'))
    .sort()
    .map((n) => join(out, pipeline, n));

/** Each file under outputs/ against the object of the same path under `prefix`: same bytes. */
async function expectStored(runDir: string, prefix: string, count: number): Promise<void> {
  const stored = await objects(prefix);
  expect(stored.size).toBe(count);
  for (const file of filesOf(join(runDir, 'outputs'))) {
    const key = `${prefix}/${file.slice(join(runDir, 'outputs').length + 1)}`;
    expect(sha(stored.get(key) ?? Buffer.alloc(0)), key).toBe(sha(readFileSync(file)));
  }
}

describe('a run with a storage sink', () => {
  it(
    'uploads every output with the bytes on disk, names it in outputs.csv, counts it in the report, links it in the finish notification, and writes the secret nowhere',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const hook = await receiver();
      const run = await genpipe(
        'run',
        sheets(dir, 'drop', 4, sinkOf('drop', 'https://cdn.example.com/drop'), `${hook.url}/hook`),
        '--out',
        out,
      ).finally(() => hook.close());
      expect(run.code, run.output).toBe(0);
      const runDir = findRunDir(out, 'drop');
      const stored = await objects('drop');
      expect(stored.size).toBe(4);
      for (const file of filesOf(join(runDir, 'outputs'))) {
        const key = `drop/${file.slice(join(runDir, 'outputs').length + 1)}`;
        expect(sha(stored.get(key) as Buffer), key).toBe(sha(readFileSync(file)));
      }
      const csv = readFileSync(join(runDir, 'outputs.csv'), 'utf8');
      expect(csv.split(/\r?\n/)[0]).toMatch(/,sink_uri,sink_url,sink_status$/);
      expect(csv).toContain('s3://media/drop/s/');
      expect(csv).toContain('https://cdn.example.com/drop/s/');
      // The report counts what is in the bucket and what is still owed.
      const bytes = filesOf(join(runDir, 'outputs')).reduce((n, f) => n + statSync(f).size, 0);
      const locations = [{ uri: 's3://media/drop', public_url: 'https://cdn.example.com/drop' }];
      expect(reportSink(runDir)).toEqual({
        uploadedFiles: 4,
        uploadedBytes: bytes,
        pendingFiles: 0,
        pendingBytes: 0,
        pendingInstances: 0,
        conflictFiles: 0,
        skippedFiles: 0,
        unverifiedFiles: 0,
        conflicts: [],
        unverified: [],
        locations,
      });
      expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain('Storage sinks: 4 files (');
      // The gallery links each uploaded file's public URL (as the run wrote it, and as `genpipe report` rewrites it).
      const links = (): string[] =>
        readGallery((p) => readFileSync(join(runDir, p), 'utf8'))
          .steps.flatMap((step) => step.cells.flatMap((c) => c.files.map((f) => f.url ?? '')))
          .sort();
      const expected = csv
        .split(/\r?\n/)
        .slice(1)
        .filter((l) => l !== '')
        .map((l) => l.split(',').at(-2) as string)
        .sort();
      expect(expected).toHaveLength(4);
      expect(expected.every((u) => u.startsWith('https://cdn.example.com/drop/s/'))).toBe(true);
      expect(links()).toEqual(expected);
      const reported = await genpipe('report', runDir);
      expect(reported.code, reported.output).toBe(0);
      expect(links()).toEqual(expected);
      // The finish notification links the public prefix, which opens on any machine.
      expect(hook.received).toHaveLength(1);
      expect((hook.received[0]?.body as { sink?: unknown }).sink).toEqual({
        uploaded_files: 4,
        uploaded_bytes: bytes,
        pending_files: 0,
        pending_bytes: 0,
        conflict_files: 0,
        skipped_files: 0,
        unverified_files: 0,
        conflicts: [],
        unverified: [],
        locations,
      });
      for (const file of filesOf(runDir)) expect(readFileSync(file).includes(store.secretAccessKey), file).toBe(false);
      expect(run.output).not.toContain(store.secretAccessKey);
    },
  );

  it(
    'a missing bucket or refused credentials refuse the run before anything is spent: exit 2, zero requests',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const before = emu.requests.inspect({}).length;
      const missing = await genpipe(
        'run',
        sheets(dir, 'nobucket', 2, `{ url: "s3://absent/x", endpoint: "${store.endpoint}", path_style: true }`),
        '--out',
        join(dir, 'runs'),
      );
      expect(missing.code).toBe(2);
      expect(missing.output).toMatch(/absent/);
      expect(missing.output).toContain('nothing was sent to the service');
      const restore = useStoreCredentials(store, { accessKeyId: 'NOSUCHKEY' });
      try {
        const refused = await genpipe('run', sheets(dir, 'badkey', 2, sinkOf('badkey')), '--out', join(dir, 'runs'));
        expect(refused.code).toBe(2);
        expect(refused.output).not.toContain(store.secretAccessKey);
      } finally {
        restore();
        undo = useStoreCredentials(store);
      }
      expect(emu.requests.inspect({}).length).toBe(before);
    },
  );

  it(
    'a store killed mid-run leaves the rest completed with uploads pending (exit 1); a resume uploads them with zero generation requests, and a second sends nothing',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = sheets(dir, 'killed', 10, sinkOf('killed'));
      const running = genpipe('run', path, '--out', out, '--concurrency', '1');
      await untilUploaded(out, 'killed', 2);
      await store.kill();
      const run = await running;
      expect(run.code, run.output).toBe(1);
      expect(run.output).toMatch(
        /completed instances? (is|are) not in the storage sink yet .*`genpipe resume` uploads them without generating anything/,
      );
      const runDir = findRunDir(out, 'killed');
      // Every instance was generated once, and its files are on disk.
      expect(filesOf(join(runDir, 'outputs'))).toHaveLength(10);
      // The report tells uploaded from pending, and they add up to the files made.
      const owed = reportSink(runDir) as { uploadedFiles: number; pendingFiles: number; pendingInstances: number; pendingBytes: number };
      expect(owed.uploadedFiles).toBeGreaterThanOrEqual(2);
      expect(owed.pendingFiles).toBeGreaterThan(0);
      expect(owed.pendingBytes).toBeGreaterThan(0);
      expect(owed.uploadedFiles + owed.pendingFiles).toBe(10);
      expect(owed.pendingInstances).toBe(owed.pendingFiles);
      expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toMatch(/pending\*\*: `genpipe resume` uploads them/);
      await store.restart();
      const sent = emu.requests.inspect({}).length;
      const resumed = await genpipe('resume', runDir);
      expect(resumed.code, resumed.output).toBe(0);
      expect(emu.requests.inspect({}).length).toBe(sent);
      const stored = await objects('killed');
      expect(stored.size).toBe(10);
      for (const file of filesOf(join(runDir, 'outputs')))
        expect(sha(stored.get(`killed/${file.slice(join(runDir, 'outputs').length + 1)}`) as Buffer)).toBe(sha(readFileSync(file)));
      expect(reportSink(runDir)).toMatchObject({ uploadedFiles: 10, pendingFiles: 0, pendingInstances: 0 });
      const records = journalOf(runDir).records.filter((r) => r.type === 'sink_uploaded').length;
      const again = await genpipe('resume', runDir);
      expect(again.code).toBe(0);
      expect(journalOf(runDir).records.filter((r) => r.type === 'sink_uploaded').length).toBe(records);
    },
  );

  it(
    "one store that keeps failing is given up on for the run, not another step's: that step's objects all land in its own store",
    { timeout: 90_000 },
    async () => {
      const other = await startLoopbackS3({ buckets: ['media'], sameKeysAs: store });
      try {
        const dir = tempDir();
        const out = join(dir, 'runs');
        const path = join(dir, 'two.yaml');
        // Step a's store dies after its first upload; step b (after a) has a healthy store of its own.
        writeFileSync(
          path,
          `version: 1\nname: two\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: 4 } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n    output:\n      sink: { url: "s3://media/two-a", endpoint: "${other.endpoint}", path_style: true }\n  b:\n    needs: [a]\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: 3 } } }\n    input: { tier: insects, seed: "{{ seed }}" }\n    output:\n      sink: ${sinkOf('two-b')}\n`,
        );
        const running = genpipe('run', path, '--out', out, '--concurrency', '1');
        await untilUploaded(out, 'two', 1);
        const uploaded = (): number => uploadsOf(out, 'two');
        await other.kill();
        const run = await running;
        expect(run.code, run.output).toBe(1);
        const runDir = findRunDir(out, 'two');
        // Every output of step b is in b's store, with the bytes on disk.
        const stored = await objects('two-b');
        expect(stored.size).toBe(3);
        for (const file of filesOf(join(runDir, 'outputs', 'b')))
          expect(sha(stored.get(`two-b/b/${file.slice(join(runDir, 'outputs', 'b').length + 1)}`) as Buffer)).toBe(sha(readFileSync(file)));
        // Only step a's are pending, and no line blames step b's instances for step a's store.
        const aUploaded = uploaded() - 3;
        expect(aUploaded).toBeGreaterThanOrEqual(1);
        expect(reportSink(runDir)).toMatchObject({ uploadedFiles: 3 + aUploaded, pendingFiles: 4 - aUploaded });
        expect(run.output).not.toMatch(/^b\[seed=\d\]:.*upload/m);
      } finally {
        await other.stop();
      }
    },
  );

  it(
    '--reuse across runs with sinks: a second run reuses every instance, sends nothing to the service, and puts the files under its own prefix',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = sheets(dir, 'again', 3, sinkOf('again/{{ run.id }}'));
      expect((await genpipe('run', path, '--out', out)).code).toBe(0);
      const sent = emu.requests.inspect({}).length;
      const second = await genpipe('run', path, '--out', out, '--reuse');
      expect(second.code, second.output).toBe(0);
      expect(emu.requests.inspect({}).length).toBe(sent);
      const [firstDir, secondDir] = runDirsOf(out, 'again') as [string, string];
      await expectStored(firstDir, `again/${firstDir.split('/').at(-1)}`, 3);
      await expectStored(secondDir, `again/${secondDir.split('/').at(-1)}`, 3);
      expect(reportSink(secondDir)).toMatchObject({ uploadedFiles: 3, pendingFiles: 0 });
    },
  );

  it(
    'a fleet: the coordinator uploads what its workers made, and a worker with no storage credentials is enough',
    { timeout: 90_000 },
    async () => {
      const redis = await startTestRedis();
      const workers: WorkerProcess[] = [];
      try {
        const dir = tempDir();
        const out = join(dir, 'runs');
        // The worker's environment has no AWS_* variable at all (startWorkerProcess passes only PATH, HOME and the service's).
        workers.push(await startWorkerProcess(redis.url, emu.url, 'sinkless', ['--queue', 'sinkfleet']));
        const run = await genpipe(
          'run',
          sheets(dir, 'fleetdrop', 4, sinkOf('fleetdrop')),
          '--out',
          out,
          '--redis',
          redis.url,
          '--queue',
          'sinkfleet',
          '--no-local-worker',
        );
        expect(run.code, run.output).toBe(0);
        const runDir = findRunDir(out, 'fleetdrop');
        await expectStored(runDir, 'fleetdrop', 4);
        expect(reportSink(runDir)).toMatchObject({ uploadedFiles: 4, pendingFiles: 0 });
        expect(workers[0]?.output()).not.toMatch(/AWS|credential|s3:/i);
      } finally {
        await killAll(workers);
        await redis.dispose();
      }
    },
  );
  it(
    'a resume whose sink prefix would render differently (an allow-listed env variable changed) is refused before anything is sent; as it was, it resumes',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = join(dir, 'team.yaml');
      writeFileSync(
        path,
        `version: 1\nname: team\nenv: [TEAM]\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n  output:\n    sink: { url: "s3://media/team/{{ env.TEAM }}", endpoint: "${store.endpoint}", path_style: true }\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: 2 } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
      );
      const before = process.env.TEAM;
      try {
        process.env.TEAM = 'alpha';
        expect((await genpipe('run', path, '--out', out)).code).toBe(0);
        const [runDir] = runDirsOf(out, 'team') as [string];
        const sent = emu.requests.byId.size;
        process.env.TEAM = 'bravo';
        const refused = await genpipe('resume', runDir);
        expect(refused.code).toBe(2);
        expect(refused.output).toContain(
          'The storage sink of step s renders its URL as s3://media/team/bravo now, but as s3://media/team/alpha when run',
        );
        expect(emu.requests.byId.size).toBe(sent);
        expect((await objects('team/bravo')).size).toBe(0);
        process.env.TEAM = 'alpha';
        expect((await genpipe('resume', runDir)).code).toBe(0);
        await expectStored(runDir, 'team/alpha', 2);
      } finally {
        if (before === undefined) delete process.env.TEAM;
        else process.env.TEAM = before;
      }
    },
  );
  it(
    'a run whose sink cannot be reached stops before anything is sent, exit 2, saying so once, and leaves no run directory',
    { timeout: 30_000 },
    async () => {
      const { createServer } = await import('node:net');
      const closed = await new Promise<number>((resolve) => {
        const probe = createServer().listen(0, '127.0.0.1', () => {
          const { port } = probe.address() as { port: number };
          probe.close(() => resolve(port));
        });
      });
      const dir = tempDir();
      const out = join(dir, 'runs');
      const sent = emu.requests.byId.size;
      const run = await genpipe(
        'run',
        sheets(dir, 'unreached', 2, `{ url: "s3://media/x", endpoint: "http://127.0.0.1:${closed}" }`),
        '--out',
        out,
      );
      expect(run.code).toBe(2);
      expect(run.output).toContain(
        `could not be checked at http://127.0.0.1:${closed} (ECONNREFUSED); nothing was sent to the generation service.`,
      );
      expect(run.output.match(/nothing was sent/g)).toHaveLength(1);
      expect(emu.requests.byId.size).toBe(sent);
      expect(existsSync(join(out, 'unreached')) ? readdirSync(join(out, 'unreached')).filter((n) => !n.startsWith('.')) : []).toEqual([]);
    },
  );
});
