// The report reads a journal of any size in bounded memory. instanceStates gathers
// each instance's records a chunk of instances at a time, spills sorted chunks and merges them; a
// run split across many chunks must give exactly what one chunk in memory gives.
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeJournalRecord, Journal, streamJournalBatches, type ReadBound } from '../../src/run/journal/journal.js';
import type { JournalRecord, JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { instanceStates, lineStartFrom, projectFact, ProjectedFact } from '../../src/report/instance-lines.js';
import { instanceStatus } from '../../src/run/journal/run-state.js';
import { InstanceOrder } from '../../src/plan/instance-order.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(() => cleanTemps());

const HASH = 'b'.repeat(64);

async function writeJournal(records: JournalRecord[]): Promise<string> {
  const path = join(tempDir('genpipe-lines-'), 'journal.jsonl');
  const journal = await Journal.open(path);
  for (const r of records) await journal.append(r);
  await journal.close();
  return path;
}

async function collect(path: string, chunk: number): Promise<[string, unknown][]> {
  const out: [string, unknown][] = [];
  for await (const [id, state] of instanceStates(path, { chunk })) {
    out.push([
      id,
      {
        status: instanceStatus(state),
        model: state.intent?.model,
        rerolls: state.rerolls,
        retries: state.retries,
        request: state.submission?.kind === 'request' ? state.submission.requestId : undefined,
        cost: state.final?.actualCostUsd,
      },
    ]);
  }
  return out;
}

/** The records one instance may have, in an order a run (and its resumes) could write them. */
const lifecycle = (id: string, n: number): fc.Arbitrary<JournalRecord[]> =>
  fc
    .record({
      ending: fc.constantFrom('completed', 'failed', 'nsfw', 'unknown', 'refused', 'failed-download', 'retried'),
      cost: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
    })
    .map(({ ending, cost }) => {
      const intent: JournalRecord = {
        type: 'intent',
        instance: id,
        model: n % 2 ? 'soul' : 'character-sheet',
        idempotencyKey: `k${n}`,
        bodyHash: HASH,
      };
      const submitted: JournalRecord = { type: 'submitted', instance: id, handle: { kind: 'request', requestId: `r${n}` } };
      const status = (s: 'completed' | 'failed' | 'nsfw'): JournalRecord => ({
        type: 'status',
        instance: id,
        status: s,
        outputs: [{ url: `https://cdn.example/${n}.png` }],
        ...(cost === undefined ? {} : { actualCostUsd: cost }),
      });
      switch (ending) {
        case 'unknown':
          return [intent];
        case 'refused':
          return [intent, { type: 'refused', instance: id, code: 'insufficient_credits' }];
        case 'failed-download':
          return [intent, submitted, status('completed'), { type: 'failed', instance: id, code: 'download', message: 'gone' }];
        case 'retried':
          return [
            intent,
            submitted,
            status('failed'),
            { type: 'retry', instance: id, attempt: 1, previous: 'failed' },
            intent,
            { ...submitted, handle: { kind: 'request', requestId: `r${n}b` } },
            status('completed'),
          ];
        default:
          return [intent, submitted, status(ending as 'completed' | 'failed' | 'nsfw')];
      }
    });

/** Many instances' lifecycles, interleaved as concurrent work (and resumes) interleave them. */
const journalRecords = fc.integer({ min: 1, max: 40 }).chain((count) =>
  fc
    .tuple(
      fc.tuple(...Array.from({ length: count }, (_, n) => lifecycle(`step[seed=${(n * 7919) % 1000}]`, n))),
      fc.array(fc.nat(), { minLength: 200, maxLength: 200 }),
    )
    .map(([lives, picks]) => {
      // Interleave: repeatedly take the next record of a picked instance, keeping each one's order.
      const queues = lives.map((l) => [...l]);
      const out: JournalRecord[] = [];
      let p = 0;
      // Bounded: every turn takes one record.
      while (queues.some((q) => q.length > 0)) {
        const open = queues.filter((q) => q.length > 0);
        const q = open[(picks[p++ % picks.length] ?? 0) % open.length] as JournalRecord[];
        out.push(q.shift() as JournalRecord);
      }
      return out;
    }),
);

describe('instanceStates', () => {
  it("spilled and merged chunks give exactly what one chunk in memory gives, in the views' order (property)", async () => {
    await fc.assert(
      fc.asyncProperty(journalRecords, fc.integer({ min: 1, max: 5 }), async (records, chunk) => {
        const path = await writeJournal(records);
        const inMemory = await collect(path, 1_000_000);
        expect(await collect(path, chunk)).toEqual(inMemory);
        const ids = inMemory.map(([id]) => id);
        // No plan.json steps given: numbers by value, text by code unit (plan/instance-order.ts).
        expect(ids).toEqual(new InstanceOrder().sort(ids));
      }),
      { numRuns: 40 },
    );
  });

  it('an instance whose records are far apart in the journal (a resume) ends as its last record says', async () => {
    const records: JournalRecord[] = [
      { type: 'intent', instance: 'a[x=1]', model: 'soul', idempotencyKey: 'k1', bodyHash: HASH },
      { type: 'submitted', instance: 'a[x=1]', handle: { kind: 'request', requestId: 'r1' } },
      ...Array.from({ length: 10 }, (_, i): JournalRecord => ({
        type: 'intent',
        instance: `b[x=${i}]`,
        model: 'soul',
        idempotencyKey: `kb${i}`,
        bodyHash: HASH,
      })),
      { type: 'status', instance: 'a[x=1]', status: 'completed', outputs: [] },
    ];
    const path = await writeJournal(records);
    const states = await collect(path, 2);
    expect(states[0]).toEqual(['a[x=1]', expect.objectContaining({ status: 'completed', request: 'r1', model: 'soul' })]);
    expect(states).toHaveLength(11);
  });

  it("reading facts from the lines' text (projectFact) gives exactly the states a full parse gives (property)", async () => {
    // Ids with a quote, a backslash or a non-ASCII letter, agent handles and reported costs take
    // the full parse; plain intents, request submissions and statuses are read from the text.
    const id = fc.constantFrom('step[seed=1]', 'step[name="q"]', 'step[path=a\\b]', 'step[chat=é]', 'step[x=1,y=2]');
    const record = fc
      .tuple(id, fc.nat({ max: 10 }), fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }))
      .map(([instance, kind, cost]): JournalRecord => {
        switch (kind) {
          case 0:
            return { type: 'intent', instance, model: 'soul', idempotencyKey: null, bodyHash: HASH };
          case 1:
            return { type: 'intent', instance, model: 'character-sheet', idempotencyKey: 'k"1', bodyHash: HASH };
          case 2:
            return { type: 'submitted', instance, handle: { kind: 'request', requestId: 'r1' } };
          case 3:
            return { type: 'submitted', instance, handle: { kind: 'agent_message', sessionId: 's1', messageId: 'm1' } };
          case 4:
            return {
              type: 'status',
              instance,
              status: 'completed',
              durationMs: 5,
              outputs: [{ url: 'https://cdn.example/1.png' }],
              result: { actualCostUsd: 2, status: 'failed' },
            };
          case 5:
            return { type: 'status', instance, status: 'nsfw', outputs: [], ...(cost === undefined ? {} : { actualCostUsd: cost }) };
          case 6:
            return { type: 'status', instance, status: 'failed', outputs: [], error: '"status":"completed"' };
          case 7:
            return { type: 'failed', instance, code: 'download', message: 'gone' };
          case 8:
            return { type: 'reroll', instance, attempt: 1, seed: 7 } as JournalRecord;
          case 9:
            return { type: 'intent', instance, model: 'soul', idempotencyKey: 'k1', bodyHash: HASH, priceUsd: cost ?? null };
          default:
            return { type: 'retry', instance, attempt: 1, previous: 'failed' };
        }
      });
    await fc.assert(
      fc.asyncProperty(fc.array(record, { minLength: 1, maxLength: 60 }), async (records) => {
        const path = await writeJournal(records);
        const read = async (fullParse: boolean): Promise<unknown[]> => {
          const out: unknown[] = [];
          for await (const entry of instanceStates(path, { chunk: 2, fullParse })) out.push(entry);
          return out;
        };
        expect(await read(false)).toEqual(await read(true));
      }),
      { numRuns: 60 },
    );
  });

  it('the layouts genpipe writes its intents, request submissions and statuses in are read from their bytes; any other goes the full way', () => {
    // The JSON bytes a journal line holds after its checksum, as the writer encodes the record.
    const bytes = (record: JournalRecord | string): Buffer =>
      Buffer.from(typeof record === 'string' ? record : encodeJournalRecord(record, () => 7).slice(9, -1), 'utf8');
    const read = (record: JournalRecord | string): [string, string] | undefined => {
      const fact = projectFact(bytes(record));
      return fact instanceof ProjectedFact ? [fact.instance, fact.fact] : undefined;
    };
    const intent: JournalRecordOf<'intent'> = {
      type: 'intent',
      instance: 'sheets[seed=1]',
      model: 'character-sheet',
      idempotencyKey: 'k1',
      bodyHash: HASH,
    };
    expect(read(intent)).toEqual(['sheets[seed=1]', '["i","character-sheet"]']);
    expect(read({ ...intent, idempotencyKey: null })).toEqual(['sheets[seed=1]', '["i","character-sheet"]']);
    // The attempt's price, when journaled, is part of the fact, as its JSON text.
    expect(read({ ...intent, priceUsd: 0.0865 })).toEqual(['sheets[seed=1]', '["i","character-sheet",0.0865]']);
    expect(read({ ...intent, priceUsd: null })).toEqual(['sheets[seed=1]', '["i","character-sheet",null]']);
    expect(read({ ...intent, priceUsd: 1e-7 })).toEqual(['sheets[seed=1]', '["i","character-sheet",1e-7]']);
    // Its text is the fact's JSON as it stands: a non-ASCII id or model is decoded as UTF-8.
    expect(read({ ...intent, instance: 'chat[name=é]', model: 'sóul' })).toEqual(['chat[name=é]', '["i","sóul"]']);
    const submitted: JournalRecordOf<'submitted'> = {
      type: 'submitted',
      instance: 'sheets[seed=1]',
      handle: { kind: 'request', requestId: 'r-1' },
    };
    expect(read(submitted)).toEqual(['sheets[seed=1]', '["r","r-1"]']);
    const status: JournalRecordOf<'status'> = {
      type: 'status',
      instance: 'sheets[seed=1]',
      status: 'nsfw',
      outputs: [{ url: 'https://cdn.example/1.png' }],
    };
    expect(read(status)).toEqual(['sheets[seed=1]', '["S","nsfw"]']);
    for (const s of ['completed', 'failed', 'canceled'] as const) expect(read({ ...status, status: s })?.[1]).toBe(`["S","${s}"]`);
    // Refused, so parsed and checked in full: an escape in an id, a model, a key or a request id;
    for (const instance of ['a[q="x"]', 'a[p=a\\b]']) {
      expect(read({ ...intent, instance })).toBeUndefined();
      expect(read({ ...submitted, instance })).toBeUndefined();
      expect(read({ ...status, instance })).toBeUndefined();
    }
    expect(read({ ...intent, model: 'a"b' })).toBeUndefined();
    // a price that is not a number at least 0, or not where the layout has it;
    for (const price of ['-1', '"0.05"', 'nul', '1.2.3x', ''])
      expect(
        read(`{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"${HASH}","priceUsd":${price},"at":7}`),
      ).toBeUndefined();
    expect(read(`{"type":"intent","instance":"","model":"m","idempotencyKey":null,"bodyHash":"${HASH}","at":7}`)).toBeUndefined();
    expect(read({ ...intent, idempotencyKey: 'k\\1' })).toBeUndefined();
    expect(read({ ...submitted, handle: { kind: 'request', requestId: 'r"1' } })).toBeUndefined();
    // another handle, or a request handle with more in it;
    expect(read({ ...submitted, handle: { kind: 'job_set', jobSetId: 'j1' } } as JournalRecord)).toBeUndefined();
    expect(read('{"type":"submitted","instance":"a","handle":{"kind":"request","requestId":"r","x":1},"at":7}')).toBeUndefined();
    // a status that names a cost anywhere, or has no outputs;
    expect(read({ ...status, actualCostUsd: 0.01 })).toBeUndefined();
    expect(read({ ...status, result: { actualCostUsd: 2 } })).toBeUndefined();
    // (a string that only mentions it is no cost: its quotes are escaped)
    expect(read({ ...status, result: { note: '"actualCostUsd"' } })?.[1]).toBe('["S","nsfw"]');
    expect(read('{"type":"status","instance":"a","status":"completed","at":7}')).toBeUndefined();
    expect(read('{"type":"status","instance":"a","status":"running","outputs":[],"at":7}')).toBeUndefined();
    // a field the layout does not have, a hash that is not 64 lowercase hex digits, no "at" digits, trailing bytes.
    expect(
      read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH + '","attempt":2,"at":7}'),
    ).toBeUndefined();
    expect(
      read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH.toUpperCase() + '","at":7}'),
    ).toBeUndefined();
    expect(
      read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH.slice(1) + '","at":7}'),
    ).toBeUndefined();
    expect(read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH + '","at":}')).toBeUndefined();
    expect(read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH + '"} ')).toBeUndefined();
    expect(read('{"type":"intent","instance":"a","model":"m","idempotencyKey":null,"bodyHash":"' + HASH + '"}')).toEqual([
      'a',
      '["i","m"]',
    ]);
    expect(read('{"type":"submitted","instance":"a","handle":{"kind":"request","requestId":"r"}}')).toEqual(['a', '["r","r"]']);
    // And the other records' types are never read this way.
    expect(read({ type: 'failed', instance: 'a', code: 'download', message: 'gone' })).toBeUndefined();
    expect(read({ type: 'retry', instance: 'a', attempt: 1, previous: 'failed' })).toBeUndefined();
  });

  it('a line whose checksum fails is not read, even when its text has the layout the report reads by pattern', async () => {
    const records: JournalRecord[] = [
      { type: 'intent', instance: 'a[x=1]', model: 'soul', idempotencyKey: 'k1', bodyHash: HASH },
      { type: 'submitted', instance: 'a[x=1]', handle: { kind: 'request', requestId: 'r1' } },
      { type: 'status', instance: 'a[x=1]', status: 'completed', outputs: [{ url: 'https://cdn.example/1.png' }] },
      { type: 'intent', instance: 'b[x=2]', model: 'soul', idempotencyKey: 'k2', bodyHash: HASH },
    ];
    const path = await writeJournal(records);
    // Damage the status line's checksum (a digit changed): its JSON is untouched and still matches.
    const lines = readFileSync(path, 'utf8').split('\n');
    const at = lines.findIndex((l) => l.includes('"type":"status"'));
    const digit = lines[at]!.charAt(0);
    lines[at] = `${digit === '0' ? '1' : '0'}${lines[at]!.slice(1)}`;
    writeFileSync(path, lines.join('\n'));
    for (const fullParse of [false, true]) {
      const states: [string, string][] = [];
      for await (const [id, state] of instanceStates(path, { fullParse })) states.push([id, instanceStatus(state)]);
      // Submitted, never seen completed: the damaged status counts for nothing.
      expect({ fullParse, states }).toEqual({
        fullParse,
        states: [
          ['a[x=1]', 'in_flight'],
          ['b[x=2]', 'unknown'],
        ],
      });
    }
  });

  // A big journal is read by two threads (the second half by report-worker.ts); the sources' tests
  // name the built worker, and a threshold of 0 bytes makes every journal big.
  const worker = new URL('../../dist/report/report-worker.js', import.meta.url);
  const readAll = async (path: string, options: Parameters<typeof instanceStates>[1]): Promise<unknown[]> => {
    const out: unknown[] = [];
    for await (const entry of instanceStates(path, options)) out.push(entry);
    return out;
  };

  // 25 journals, each read by one thread and by two: past the 20 s default in a whole suite run
  // beside two CPU-bound processes (2026-11-27, a loaded CI run): a bound for a hang, not a speed.
  it(
    'two threads give exactly what one gives, projected or parsed in full, whatever the chunk (property)',
    { timeout: 180_000 },
    async () => {
      await fc.assert(
        fc.asyncProperty(
          journalRecords,
          fc.integer({ min: 1, max: 6 }),
          fc.boolean(),
          fc.boolean(),
          async (records, chunk, fullParse, evenSplit) => {
            const path = await writeJournal(records);
            const one = await readAll(path, { chunk: 1_000_000, fullParse });
            // Split at the middle byte, or where this thread has got to once the second is ready.
            expect(await readAll(path, { chunk, fullParse, worker, parallelMinBytes: 0, evenSplit })).toEqual(one);
          },
        ),
        { numRuns: 25 },
      );
    },
  );

  it('an instance whose records straddle the two halves gets them back in journal order; torn and damaged lines are skipped alike', async () => {
    const ids = Array.from({ length: 30 }, (_, n) => `s[seed=${n}]`);
    // Every intent in the first half, every outcome in the second: a wrong order of the halves'
    // chunks would replay a status before its intent.
    const records: JournalRecord[] = [
      ...ids.map((id, n): JournalRecord => ({ type: 'intent', instance: id, model: 'soul', idempotencyKey: `k${n}`, bodyHash: HASH })),
      ...ids.map((id, n): JournalRecord => ({ type: 'submitted', instance: id, handle: { kind: 'request', requestId: `r${n}` } })),
      ...ids.map((id, n): JournalRecord => ({ type: 'status', instance: id, status: n % 3 === 0 ? 'failed' : 'completed', outputs: [] })),
      ...ids.slice(0, 5).map((id): JournalRecord => ({ type: 'retry', instance: id, attempt: 1, previous: 'failed' })),
    ];
    const path = await writeJournal(records);
    const lines = readFileSync(path, 'utf8').split('\n');
    // A damaged status in the second half, and a torn last line.
    const at = lines.findIndex((l) => l.includes('"instance":"s[seed=20]","status"'));
    lines[at] = lines[at]!.replace('"completed"', '"complexed"');
    writeFileSync(path, `${lines.join('\n')}{"type":"status","inst`);
    const one = await readAll(path, { chunk: 1_000_000 });
    const two = await readAll(path, { chunk: 4, worker, parallelMinBytes: 0, evenSplit: true });
    expect(two).toEqual(one);
    const statuses = new Map((two as [string, Parameters<typeof instanceStatus>[0]][]).map(([id, state]) => [id, instanceStatus(state)]));
    expect(statuses.get('s[seed=1]')).toBe('completed');
    expect(statuses.get('s[seed=20]')).toBe('in_flight');
    expect(statuses.size).toBe(30);
  });

  it('a bound set while the journal is read splits it exactly: this reader stops at the first line starting at it, the other starts there (property)', async () => {
    // Several read chunks (a megabyte each) of lines, so that the bound moves between two of them.
    const records: JournalRecord[] = Array.from({ length: 25_000 }, (_, n) => ({
      type: 'intent',
      instance: `s[seed=${n}]`,
      model: n % 7 === 0 ? 'sóul' : 'soul',
      idempotencyKey: `k${n}`,
      bodyHash: HASH,
    }));
    const path = join(tempDir('genpipe-bound-'), 'journal.jsonl');
    writeFileSync(path, records.map((r) => encodeJournalRecord(r, () => 7)).join(''));
    const { size } = statSync(path);
    expect(size).toBeGreaterThan(3 * 2 ** 20);
    const text = readFileSync(path);
    const starts = [0];
    for (let i = text.indexOf(0x0a); i !== -1 && i + 1 < size; i = text.indexOf(0x0a, i + 1)) starts.push(i + 1);
    const ids = async (options: { start?: number; bound?: ReadBound }, onBatch?: () => void): Promise<string[]> => {
      const out: string[] = [];
      for await (const batch of streamJournalBatches(path, options)) {
        for (const r of batch) out.push((r as { instance: string }).instance);
        onBatch?.();
      }
      return out;
    };
    // Where the second reader is told to start: a fixed byte, or half of what is left after some batches.
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: size + 10 }),
        fc.boolean(),
        fc.option(fc.nat(3), { nil: undefined }),
        async (byte, snap, afterBatches) => {
          // A byte, or the start of the line it falls in (a bound right at a line's start).
          const at = snap ? (starts.findLast((start) => start <= byte) ?? 0) : byte;
          const bound: ReadBound = { end: afterBatches === undefined ? at : Infinity, read: 0 };
          let batches = 0;
          const first = await ids({ bound }, () => {
            if (afterBatches !== undefined && ++batches === afterBatches + 1) bound.end = Math.floor((bound.read + size) / 2);
          });
          const second = bound.end === Infinity ? [] : await ids({ start: await lineStartFrom(path, bound.end) });
          expect([...first, ...second]).toEqual(records.map((r) => (r as { instance: string }).instance));
        },
      ),
      { numRuns: 30 },
    );
  });

  it('a second thread that fails or stops fails the read with a sentence: never a report missing half the journal', async () => {
    const path = await writeJournal([
      { type: 'intent', instance: 'a[x=1]', model: 'soul', idempotencyKey: 'k1', bodyHash: HASH },
      { type: 'intent', instance: 'b[x=2]', model: 'soul', idempotencyKey: 'k2', bodyHash: HASH },
    ]);
    const dir = tempDir('genpipe-bad-worker-');
    const throwing = join(dir, 'throws.mjs');
    writeFileSync(throwing, "throw new Error('disk on fire');\n");
    const exiting = join(dir, 'exits.mjs');
    writeFileSync(exiting, 'process.exit(3);\n');
    await expect(readAll(path, { worker: new URL(`file://${throwing}`), parallelMinBytes: 0 })).rejects.toThrow(
      /^Reading the second half of .*journal\.jsonl in another thread failed: disk on fire$/,
    );
    await expect(readAll(path, { worker: new URL(`file://${exiting}`), parallelMinBytes: 0 })).rejects.toThrow(
      /in another thread failed: the thread stopped \(exit code 3\) before answering$/,
    );
  });
});
