// Pins reliability.md #1 ("before the intent record is synced"): an instance's intent is on disk,
// synced, before its credit-spending POST leaves. A kill -9 keeps the page cache, so a crash test
// cannot tell a written intent from a synced one; this test watches the order in-process instead:
//
// - every fdatasync of the journal's file handle is noted, with the journal's size when it was
//   called (a datasync makes every byte written before it durable), once it has completed;
// - every submit POST is noted as the client's dispatcher receives it, with the largest size a
//   completed sync covered at that moment.
//
// After the run, each POST is matched to its instance, and the journal (append-only) is read with
// each line's byte offset: the instance's intents that end within the synced size must number at
// least the POSTs sent for it so far. Mutations this catches, in runner.ts #submit: the intent
// appended with `durable` false, or the `await` of that append removed.
import { fstatSync, readFileSync, readlinkSync, realpathSync, writeFileSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { encodeLine } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { runPlan } from '../../src/run/runner.js';
import { closeRun, isSubmit, MARKETING_SUBMIT, prepareRun, SHEET_SUBMIT, type Exchange, type InProcessRun, runOf } from './pin-helpers.js';
import { cleanTemps, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);
afterEach(() => {
  vi.restoreAllMocks();
});

/** A manifest with keyed character sheets and keyless marketing images, side by side. */
function mixedManifest(dir: string, sheets: number, ads: number): string {
  const path = join(dir, 'mixed.yaml');
  const text = `version: 1
name: mixed
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${sheets} } }
    input:
      tier: cats
      seed: "{{ seed }}"
      brief: "A mascot"
  ads:
    model: marketing-image
    matrix:
      n: { range: { from: 1, to: ${ads} } }
    input:
      prompt: "Banner number {{ n }} for a pet food brand"
      resolution: 1k
      quality: low
`;
  writeFileSync(path, text);
  return path;
}

interface SyncEvent {
  /** Journal size in bytes when the datasync was called. */
  size: number;
}

/** Watches the journal's datasyncs: `synced()` is the size the last completed one covered. */
async function watchJournalSyncs(journalPath: string): Promise<{ events: SyncEvent[]; synced: () => number }> {
  const probe = tempDir('genpipe-probe-');
  const handle = await open(join(probe, 'probe'), 'w');
  const proto = handle.constructor.prototype as FileHandle;
  await handle.close();
  const original = proto.datasync;
  const events: SyncEvent[] = [];
  let synced = 0;
  vi.spyOn(proto, 'datasync').mockImplementation(async function (this: FileHandle): Promise<void> {
    let path = '';
    try {
      path = readlinkSync(`/proc/self/fd/${this.fd}`);
    } catch {
      // Not a file we can name: not the journal.
    }
    if (path !== journalPath) return original.call(this);
    const size = fstatSync(this.fd).size;
    await original.call(this);
    events.push({ size });
    synced = Math.max(synced, size);
  });
  return { events, synced: () => synced };
}

interface JournalLine {
  record: JournalRecord;
  /** Byte offset just after the line's newline. */
  end: number;
}

function journalLines(path: string): JournalLine[] {
  const data = readFileSync(path);
  const lines: JournalLine[] = [];
  for (let start = 0; start < data.length;) {
    const nl = data.indexOf(0x0a, start);
    expect(nl, 'the journal ends with a whole line').toBeGreaterThan(-1);
    const record = JSON.parse(data.subarray(start + 9, nl).toString('utf8')) as JournalRecord;
    // Each line is exactly what the journal encodes for its record (checksum included).
    expect(encodeLine(data.subarray(start + 9, nl).toString('utf8')).equals(data.subarray(start, nl + 1))).toBe(true);
    lines.push({ record, end: nl + 1 });
    start = nl + 1;
  }
  return lines;
}

/** The instance a submit POST is for: by its Idempotency-Key (sheets), by its prompt (ads). */
function instanceOfPost(post: Exchange, byKey: Map<string, string>): string {
  if (post.path === SHEET_SUBMIT) {
    const key = post.headers['idempotency-key'];
    expect(key, 'a character-sheet submit carries an Idempotency-Key').toBeDefined();
    const id = byKey.get(key as string);
    expect(id, `no intent in the journal has the key ${key}`).toBeDefined();
    return id as string;
  }
  expect(post.path).toBe(MARKETING_SUBMIT);
  expect(post.headers['idempotency-key'], 'a marketing-image submit is keyless').toBeUndefined();
  const n = /Banner number (\d+) /.exec(JSON.parse(post.body ?? '{}').prompt ?? '')?.[1];
  expect(n, 'the marketing body names its banner').toBeDefined();
  return `ads[n=${n}]`;
}

/**
 * Runs the manifest in-process and checks, for every submit POST, that the instance's intents
 * within the synced part of the journal at dispatch time number at least its POSTs so far.
 */
async function checkIntentSyncedBeforePost(emu: Emulator, sheets: number, ads: number, concurrency: number): Promise<void> {
  let run: InProcessRun | undefined;
  try {
    run = await prepareRun(emu, mixedManifest(tempDir(), sheets, ads));
    const journalPath = join(run.runDir, 'journal.jsonl');
    // /proc/self/fd names the file by its real path.
    const syncs = await watchJournalSyncs(join(realpathSync(run.runDir), 'journal.jsonl'));
    const syncedAtDispatch = new Map<number, number>();
    run.agent.onDispatch = (e) => {
      if (isSubmit(e)) syncedAtDispatch.set(e.seq, syncs.synced());
    };
    const summary = await runPlan({
      ...runOf(run),
      signal: new AbortController().signal,
      concurrency,
      ratePerSecond: 10_000,
      poll: { floorMs: 1, baseMs: 2, capMs: 20 },
    });
    expect(summary.outcome).toBe('completed');
    expect(summary.counts.completed).toBe(sheets + ads);

    const lines = journalLines(journalPath);
    const byKey = new Map<string, string>();
    for (const { record } of lines)
      if (record.type === 'intent' && record.idempotencyKey !== null) byKey.set(record.idempotencyKey, record.instance);
    const posts = run.agent.exchanges.filter(isSubmit);
    expect(posts.filter((p) => p.path === SHEET_SUBMIT)).toHaveLength(sheets);
    expect(posts.filter((p) => p.path === MARKETING_SUBMIT)).toHaveLength(ads);
    const sent = new Map<string, number>();
    const problems: string[] = [];
    for (const post of posts) {
      const instance = instanceOfPost(post, byKey);
      const nth = (sent.get(instance) ?? 0) + 1;
      sent.set(instance, nth);
      const synced = syncedAtDispatch.get(post.seq) ?? 0;
      const intentsSynced = lines.filter((l) => l.record.type === 'intent' && l.record.instance === instance && l.end <= synced).length;
      if (intentsSynced < nth)
        problems.push(`${post.path} #${nth} of ${instance} left with ${intentsSynced} synced intent(s) (synced up to byte ${synced})`);
    }
    expect(problems, 'submit POSTs that left before their intent was synced').toEqual([]);
    // The watch saw the journal's syncs at all (a run without any would make the check vacuous).
    expect(syncs.events.length).toBeGreaterThan(0);
  } finally {
    await closeRun(run);
  }
}

describe('the intent is synced before the credit-spending POST leaves', () => {
  let emu: Emulator;
  beforeAll(async () => {
    emu = await startEmulator({ port: 0, timeScale: 0.001, seed: 5, log: () => {} });
  });
  afterAll(async () => {
    await emu?.close();
  });

  // One instance at a time: no other instance's durable record (a keyless `submitted`) can sync an
  // intent by chance between its write and its POST, so only the intent's own sync can cover it.
  it('for keyed character sheets and keyless marketing images, one instance at a time', async () => {
    await checkIntentSyncedBeforePost(emu, 4, 4, 1);
  });

  // Many at once: group commit shares syncs between instances, and the order still holds.
  it('for keyed and keyless submits with 8 in flight', async () => {
    await checkIntentSyncedBeforePost(emu, 8, 8, 8);
  });
});
