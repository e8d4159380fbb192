// A new run's polls start from a prior, the durations this pipeline's requests
// took in its earlier runs (the journals beside the run's directory), instead of a cold backoff.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { startEmulator } from '../../../src/emulator/index.js';
import { Journal } from '../../../src/run/journal/journal.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { readPollPrior, seenDuration } from '../../../src/run/polling/poll-prior.js';
import { cleanTemps, HF_KEY, journalOf, tempDir } from '../runner-helpers.js';

afterAll(() => cleanTemps());

const BODY = 'a'.repeat(64);

async function journal(dir: string, records: JournalRecord[]): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const j = await Journal.open(join(dir, 'journal.jsonl'));
  for (const r of records) await j.append(r);
  await j.close();
}

/** One request of `model`: submitted at `at`, ended at `at + took` (status `status`), with or without durationMs. */
function request(
  id: string,
  model: string,
  at: number,
  took: number,
  options: { status?: 'completed' | 'failed'; recorded?: number } = {},
): JournalRecord[] {
  return [
    { type: 'intent', instance: id, model, idempotencyKey: `k-${id}`, bodyHash: BODY, at },
    { type: 'submitted', instance: id, handle: { kind: 'request', requestId: `r-${id}` }, at },
    {
      type: 'status',
      instance: id,
      status: options.status ?? 'completed',
      outputs: [],
      at: at + took,
      ...(options.recorded === undefined ? {} : { durationMs: options.recorded }),
    },
  ];
}

describe('readPollPrior', () => {
  it('reads per model the intervals the newest earlier runs saw their requests end in, not the run itself', async () => {
    const pipeline = join(tempDir(), 'pipe');
    await journal(join(pipeline, '20260101T000000Z-aaaa'), [...request('old', 'dop', 0, 99_000, { recorded: 99_000 })]);
    await journal(join(pipeline, '20260102T000000Z-bbbb'), [
      ...request('s1', 'character-sheet', 1_000, 9_000, { recorded: 4_000 }),
      // No durationMs (a journal written before it was recorded): the status record's time is used.
      ...request('s2', 'character-sheet', 1_000, 5_000),
      // A failed request says nothing about how long a result takes.
      ...request('s3', 'character-sheet', 1_000, 50, { status: 'failed', recorded: 50 }),
      ...request('m1', 'marketing-image', 2_000, 20_000, { recorded: 15_000 }),
    ]);
    const current = join(pipeline, '20260103T000000Z-cccc');
    await journal(current, [...request('now', 'character-sheet', 0, 1, { recorded: 1 })]);
    const prior = await readPollPrior(current, { maxRuns: 1 });
    // s1 was seen done 9 s after its submission, its estimate 4 s: it ended in (0, 9 s]; s2 exactly at 5 s.
    const sheets = [
      { lo: 0, hi: 9_000 },
      { lo: 5_000, hi: 5_000 },
    ];
    expect(Object.fromEntries(prior)).toEqual({ 'character-sheet': sheets, 'marketing-image': [{ lo: 10_000, hi: 20_000 }] });
    expect(Object.fromEntries(await readPollPrior(current))).toEqual({
      'character-sheet': sheets,
      'marketing-image': [{ lo: 10_000, hi: 20_000 }],
      dop: [{ lo: 99_000, hi: 99_000 }],
    });
  });

  it('keeps at most perModel durations per model, and passes over a journal it cannot read', async () => {
    const pipeline = join(tempDir(), 'pipe');
    const many = Array.from({ length: 10 }, (_, i) => request(`s${i}`, 'soul', 0, 1_000 + i, { recorded: 1_000 + i })).flat();
    await journal(join(pipeline, '20260102T000000Z-bbbb'), many);
    mkdirSync(join(pipeline, '20260104T000000Z-dddd'));
    writeFileSync(join(pipeline, '20260104T000000Z-dddd', 'journal.jsonl'), '\u0000 not a journal\n');
    const prior = await readPollPrior(join(pipeline, '20260105T000000Z-eeee'), { perModel: 4 });
    expect(prior.get('soul')).toEqual([1_000, 1_001, 1_002, 1_003].map((d) => ({ lo: d, hi: d })));
  });

  it('an estimate within the interval gives its lower end back: the estimate is its middle', () => {
    // Seen at 3.6 s, estimated 3.2 s: the last poll that missed was at 2.8 s.
    expect(seenDuration(3_600, 3_200)).toEqual({ lo: 2_800, hi: 3_600 });
    // Told exactly (a webhook) and journaled 4 ms later: within 4 ms either side of it.
    expect(seenDuration(3_004, 3_000)).toEqual({ lo: 2_996, hi: 3_004 });
    // An estimate past the time seen (clocks a millisecond apart) is the end itself.
    expect(seenDuration(2_999, 3_000)).toEqual({ lo: 3_000, hi: 3_000 });
    // An estimate below the middle cannot put the end before the submission.
    expect(seenDuration(9_000, 1_000)).toEqual({ lo: 0, hi: 9_000 });
    // No estimate recorded (an older journal): the end counts as seen.
    expect(seenDuration(5_000, undefined)).toEqual({ lo: 5_000, hi: 5_000 });
  });

  it('an output root with no earlier run gives no prior', async () => {
    expect((await readPollPrior(join(tempDir(), 'pipe', 'run'))).size).toBe(0);
  });
});

describe("a run starts polling from its pipeline's earlier runs", () => {
  it("the second run sees its requests end without waiting for the cold backoff's first poll", { timeout: 60_000 }, async () => {
    // Requests take 0.6-0.7 s; the cold backoff's first poll is at 3.4-4 s (initial_ms 4000, 15% jitter).
    const emu = await startEmulator({
      port: 0,
      timeScale: 1,
      log: () => {},
      durations: { 'character-sheet': { queuedMs: [0, 0], runMs: [600, 700] } },
    });
    try {
      const dir = tempDir();
      const out = tempDir();
      const manifest = join(dir, 'prior.yaml');
      writeFileSync(
        manifest,
        `version: 1
name: prior
defaults:
  polling: { initial_ms: 4000, min_ms: 100 }
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: 3 } }
    input: { tier: cats, seed: "{{ seed }}" }
`,
      );
      const io: CliIO = {
        out: () => {},
        write: async () => {},
        err: () => {},
        env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
        signal: new AbortController().signal,
      };
      const seenAfter = (runDir: string): number[] => {
        const records = journalOf(runDir).records;
        const submitted = new Map(records.flatMap((r) => (r.type === 'submitted' ? [[r.instance, r.at!] as const] : [])));
        return records.flatMap((r) => (r.type === 'status' ? [r.at! - submitted.get(r.instance)!] : []));
      };
      const runs = async (): Promise<string[]> => {
        const { readdirSync } = await import('node:fs');
        return readdirSync(join(out, 'prior'))
          .filter((n) => !n.startsWith('.'))
          .sort();
      };
      expect(await main(['run', manifest, '--out', out, '--quiet'], io)).toBe(0);
      const [first] = await runs();
      const cold = seenAfter(join(out, 'prior', first!));
      expect(cold).toHaveLength(3);
      for (const ms of cold) expect(ms).toBeGreaterThanOrEqual(3_400);
      // What the first run recorded: its estimates, well under the 3.4 s it took to notice.
      for (const r of journalOf(join(out, 'prior', first!)).records) if (r.type === 'status') expect(r.durationMs).toBeLessThan(2_100);
      await new Promise((r) => setTimeout(r, 1_100)); // run ids have a one-second clock
      expect(await main(['run', manifest, '--out', out, '--quiet'], io)).toBe(0);
      const second = (await runs()).at(-1)!;
      expect(second).not.toBe(first);
      const warm = seenAfter(join(out, 'prior', second));
      expect(warm).toHaveLength(3);
      for (const ms of warm) expect(ms).toBeLessThan(3_000);
    } finally {
      await emu.close();
    }
  });
});
