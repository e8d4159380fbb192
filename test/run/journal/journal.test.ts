import { mkdtemp, open, readFile, rm, stat, writeFile, appendFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  encodeLine,
  Journal,
  JournalError,
  parseJournal,
  readJournal,
  streamJournal,
  type JournalFile,
} from '../../../src/run/journal/journal.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { registerSecret } from '../../../src/util/redact.js';

const HASH = 'a'.repeat(64);
let dir: string;
let path: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'genpipe-journal-'));
  path = join(dir, 'journal.jsonl');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const intent = (i: number): JournalRecord => ({
  type: 'intent',
  instance: `sheets[seed=${i}]`,
  model: 'character-sheet',
  idempotencyKey: `key-${i}`,
  bodyHash: HASH,
  at: 1_000 + i,
});

/** A sample of every record type, so the round trip covers the whole union. */
const SAMPLE: JournalRecord[] = [
  { type: 'run_started', runId: 'run-1', pipeline: 'demo', planHash: 'p1', at: 1 },
  intent(0),
  { type: 'intent', instance: 'speak[line=2]', model: 'speak', idempotencyKey: null, bodyHash: HASH, at: 2 },
  { type: 'submitted', instance: 'sheets[seed=0]', handle: { kind: 'request', requestId: 'r-1' }, at: 3 },
  { type: 'submitted', instance: 'batch', handle: { kind: 'job_set', jobSetId: 'js-1' }, at: 4 },
  { type: 'submitted', instance: 'chat[turn=1]', handle: { kind: 'agent_message', sessionId: 's-1', messageId: 'm-1' }, at: 5 },
  {
    type: 'status',
    instance: 'sheets[seed=0]',
    status: 'completed',
    outputs: [{ url: 'https://cdn.gen.test/a.png', contentType: 'image/png' }],
    at: 6,
  },
  { type: 'downloaded', instance: 'sheets[seed=0]', output: 0, path: 'outputs/sheets_seed=0.png', sha256: HASH, size: 12, at: 7 },
  { type: 'failed', instance: 'speak[line=2]', code: 'unprocessable', message: 'The service refused the request body.', at: 8 },
  { type: 'agent_session', conversation: 'chat', sessionId: 's-1', at: 9 },
  { type: 'run_finished', outcome: 'completed', at: 10 },
];

async function writeAll(records: readonly JournalRecord[]): Promise<Buffer> {
  const journal = await Journal.open(path);
  for (const record of records) await journal.append(record, { durable: true });
  await journal.close();
  return readFile(path);
}

/** Wraps the real file to count calls, and optionally hold `sync` until released. */
function instrument(): {
  wrap: (file: JournalFile) => JournalFile;
  syncs: () => number;
  writes: () => number;
  gate: () => { entered: Promise<void>; release: () => void };
} {
  let syncs = 0;
  let writes = 0;
  let held: { enteredResolve: () => void; released: Promise<void> } | undefined;
  return {
    syncs: () => syncs,
    writes: () => writes,
    gate() {
      let enteredResolve!: () => void;
      let release!: () => void;
      const entered = new Promise<void>((resolve) => (enteredResolve = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      held = { enteredResolve, released };
      return { entered, release };
    },
    wrap: (file) => ({
      write: async (data) => {
        writes++;
        await file.write(data);
      },
      sync: async () => {
        syncs++;
        const gate = held;
        held = undefined;
        if (gate) {
          gate.enteredResolve();
          await gate.released;
        }
        await file.sync();
      },
      close: () => file.close(),
    }),
  };
}

describe('journal line format', () => {
  it('writes one "<crc32 hex> <json>" line per record, ending with a newline', async () => {
    const data = (await writeAll([intent(1)])).toString('utf8');
    expect(data).toMatch(/^[0-9a-f]{8} \{"type":"intent",.*\}\n$/);
    const json = data.slice(9, -1);
    expect(JSON.parse(json)).toEqual(intent(1));
    expect(data).toBe(encodeLine(json).toString('utf8'));
  });

  it('round-trips every record type, in order', async () => {
    await writeAll(SAMPLE);
    const result = await readJournal(path);
    expect(result).toEqual({ records: SAMPLE, tornTail: false, corrupt: [], endOffset: (await stat(path)).size });
  });

  it('stamps `at` from the injected clock when a record has none', async () => {
    const journal = await Journal.open(path, { now: () => 42_000 });
    await journal.append({ type: 'run_finished' });
    await journal.close();
    expect((await readJournal(path)).records).toEqual([{ type: 'run_finished', at: 42_000 }]);
  });

  it('keeps fields it does not know (a newer genpipe may add some)', async () => {
    const record = { ...intent(1), priority: 3 } as JournalRecord;
    await writeAll([record]);
    expect((await readJournal(path)).records[0]).toEqual(record);
  });

  it('refuses an invalid record and writes nothing', async () => {
    const journal = await Journal.open(path);
    const bad = { type: 'intent', instance: 'x', model: 'm', idempotencyKey: null, bodyHash: 'not-a-hash' } as JournalRecord;
    await expect(journal.append(bad, { durable: true })).rejects.toBeInstanceOf(JournalError);
    const escaping = { type: 'downloaded', instance: 'x', path: '../../etc/passwd', sha256: HASH, size: 1 } as JournalRecord;
    await expect(journal.append(escaping)).rejects.toThrow(/relative path inside the run directory/);
    await journal.close();
    expect((await readFile(path)).length).toBe(0);
  });
});

describe('Journal.open', () => {
  it('creates the file with mode 0600 and reports it as created', async () => {
    const journal = await Journal.open(path);
    expect(journal.created).toBe(true);
    expect(journal.recovered.records).toEqual([]);
    await journal.close();
    expect((await stat(path)).mode & 0o777).toBe(0o600);
  });

  it('appends to an existing journal and exposes what it held', async () => {
    await writeAll(SAMPLE.slice(0, 3));
    const journal = await Journal.open(path);
    expect(journal.created).toBe(false);
    expect(journal.recovered.records).toEqual(SAMPLE.slice(0, 3));
    await journal.append(SAMPLE[3]!);
    await journal.close();
    expect((await readJournal(path)).records).toEqual(SAMPLE.slice(0, 4));
  });

  it('hands each record to onRecord instead of holding them, and still cuts a torn tail', async () => {
    const full = await writeAll(SAMPLE.slice(0, 4));
    await writeFile(path, full.subarray(0, full.length - 5));
    const seen: JournalRecord[] = [];
    const journal = await Journal.open(path, { onRecord: (record) => seen.push(record) });
    expect(seen).toEqual(SAMPLE.slice(0, 3));
    expect(journal.recovered).toMatchObject({ records: [], tornTail: true });
    await journal.append(SAMPLE[4]!);
    await journal.close();
    expect((await readJournal(path)).records).toEqual([...SAMPLE.slice(0, 3), SAMPLE[4]]);
  });

  it('refuses appends after close, and close is idempotent', async () => {
    const journal = await Journal.open(path);
    await journal.close();
    await journal.close();
    await expect(journal.append(intent(1))).rejects.toThrow(/closed/);
    await expect(journal.flush()).rejects.toThrow(/closed/);
  });
});

describe('torn tail (reliability.md #2)', () => {
  it('drops the last record cut at every byte offset, keeping every earlier one', async () => {
    const records = SAMPLE;
    const full = await writeAll(records);
    const lastStart = full.lastIndexOf(0x0a, full.length - 2) + 1;
    expect(lastStart).toBeGreaterThan(0);
    const lastLength = full.length - lastStart;
    let checked = 0;
    for (let cut = 0; cut < lastLength; cut++) {
      const result = parseJournal(full.subarray(0, lastStart + cut));
      expect(result.records).toEqual(records.slice(0, -1));
      expect(result.corrupt).toEqual([]);
      // At offset 0 the last record is simply absent; anywhere else a partial line is left.
      expect(result.tornTail).toBe(cut > 0);
      expect(result.endOffset).toBe(lastStart);
      checked++;
    }
    expect(checked).toBe(lastLength);
  });

  it('resumes from a journal cut at every byte offset of its last record: the tail is cut off and appends start on a fresh line', async () => {
    const records = SAMPLE.slice(0, 4);
    const full = await writeAll(records);
    const lastStart = full.lastIndexOf(0x0a, full.length - 2) + 1;
    for (let cut = 0; cut < full.length - lastStart; cut++) {
      await writeFile(path, full.subarray(0, lastStart + cut));
      const journal = await Journal.open(path);
      expect(journal.recovered.records).toEqual(records.slice(0, -1));
      expect(journal.recovered.tornTail).toBe(cut > 0);
      // The resumed run writes the record again, as it would after redoing the step.
      await journal.append(records.at(-1)!, { durable: true });
      await journal.close();
      const reread = await readJournal(path);
      expect(reread).toEqual({ records, tornTail: false, corrupt: [], endOffset: full.length });
    }
  });

  it('treats a complete last line garbled past repair, or a tail of zeros, as torn', async () => {
    const full = await writeAll(SAMPLE.slice(0, 3));
    const garbled = Buffer.from(full);
    // Pages of an unsynced write lost: a run of zeros inside the last line, its newline kept.
    garbled.fill(0, garbled.length - 30, garbled.length - 10);
    const a = parseJournal(garbled);
    expect(a.records).toEqual(SAMPLE.slice(0, 2));
    expect(a.tornTail).toBe(true);
    expect(a.corrupt).toEqual([]);

    const zeros = parseJournal(Buffer.concat([full, Buffer.alloc(4096)]));
    expect(zeros.records).toEqual(SAMPLE.slice(0, 3));
    expect(zeros.tornTail).toBe(true);
    expect(zeros.endOffset).toBe(full.length);
  });

  it('a complete last line that one flipped byte explains is damage, not a torn write: reported, not cut off', async () => {
    // A torn write never looks like one flipped byte; cutting such a line could drop a synced intent.
    const full = await writeAll(SAMPLE.slice(0, 3));
    const flipped = Buffer.from(full);
    flipped[flipped.length - 5] = flipped[flipped.length - 5]! ^ 0x01;
    const a = parseJournal(flipped);
    expect(a.records).toEqual(SAMPLE.slice(0, 2));
    expect(a.tornTail).toBe(false);
    expect(a.corrupt).toMatchObject([{ line: 3, reason: 'checksum mismatch' }]);
  });

  it('a missing journal reads as empty', async () => {
    expect(await readJournal(join(dir, 'nope.jsonl'))).toEqual({ records: [], tornTail: false, corrupt: [], endOffset: 0 });
  });
});

describe('corruption in the middle', () => {
  it('detects a checksum mismatch, skips that line, reports it and keeps reading', async () => {
    const full = await writeAll(SAMPLE.slice(0, 5));
    const lines = full.toString('utf8').split('\n');
    // Change one character of the third record's JSON without touching its checksum.
    const original = lines[2]!;
    lines[2] = original.replace('"speak[line=2]"', '"speak[line=3]"');
    expect(lines[2]).not.toBe(original);
    const result = parseJournal(Buffer.from(lines.join('\n')));
    // One byte changed: the checksum finds it, so the line is known to be speak[line=2]'s, not line=3's.
    expect(result.corrupt).toEqual([{ line: 3, reason: 'checksum mismatch', instance: 'speak[line=2]' }]);
    expect(result.records).toEqual([SAMPLE[0], SAMPLE[1], SAMPLE[3], SAMPLE[4]]);
    expect(result.tornTail).toBe(false);
  });

  it('reports a malformed prefix, a non-JSON body and an unknown record type', async () => {
    const good = encodeLine(JSON.stringify(SAMPLE[0]));
    const data = Buffer.concat([
      Buffer.from('not a journal line\n'),
      encodeLine('{"type":'),
      encodeLine(JSON.stringify({ type: 'from_the_future', x: 1 })),
      encodeLine(JSON.stringify({ type: 'intent', instance: 'x' })),
      good,
    ]);
    const result = parseJournal(data);
    expect(result.records).toEqual([SAMPLE[0]]);
    expect(result.corrupt.map((c) => c.line)).toEqual([1, 2, 3, 4]);
    expect(result.corrupt[0]!.reason).toMatch(/malformed checksum prefix/);
    expect(result.corrupt[1]!.reason).toMatch(/not JSON/);
    expect(result.corrupt[2]!.reason).toMatch(/unknown record type "from_the_future"/);
    expect(result.corrupt[3]!.reason).toMatch(/invalid record/);
  });

  it('the prefix is exactly eight lowercase hex digits and a space: anything else is malformed', () => {
    const json = JSON.stringify(SAMPLE[0]);
    const prefixes = ['ABCDEF01 ', '0123456g ', '01234567\t', '-1234567 ', '+1234567 ', '0x123456 ', ' 1234567 '];
    const result = parseJournal(Buffer.concat([...prefixes.map((p) => Buffer.from(`${p}${json}\n`)), encodeLine(json)]));
    expect(result.records).toEqual([SAMPLE[0]]);
    expect(result.corrupt.map((c) => c.reason)).toEqual(prefixes.map(() => 'malformed checksum prefix'));
  });

  it('a last line whose checksum is right but whose content is unknown is corruption, not a torn write', () => {
    const data = Buffer.concat([encodeLine(JSON.stringify(SAMPLE[0])), encodeLine(JSON.stringify({ type: 'from_the_future' }))]);
    const result = parseJournal(data);
    expect(result.tornTail).toBe(false);
    expect(result.corrupt).toEqual([{ line: 2, reason: 'unknown record type "from_the_future"' }]);
  });

  it('leaves middle corruption in place when opening for append with acceptCorrupt', async () => {
    const full = await writeAll(SAMPLE.slice(0, 3));
    const broken = Buffer.from(full.toString('utf8').replace('"demo"', '"dEmo"'));
    await writeFile(path, broken);
    const journal = await Journal.open(path, { acceptCorrupt: true });
    // A run_started line names no instance.
    expect(journal.recovered.corrupt).toEqual([{ line: 1, reason: 'checksum mismatch' }]);
    await journal.append(SAMPLE[3]!);
    await journal.close();
    const after = await readFile(path);
    expect(after.subarray(0, broken.length).equals(broken)).toBe(true);
    expect((await readJournal(path)).records).toEqual(SAMPLE.slice(1, 4));
  });
});

describe('streamJournal', () => {
  async function streamed(): Promise<JournalRecord[]> {
    const out: JournalRecord[] = [];
    for await (const record of streamJournal(path)) out.push(record);
    return out;
  }

  it('yields what readJournal reads, with lines that span several read chunks', async () => {
    // A 600 KB message spans three 256 KB chunks; small records around it cut chunks mid-line.
    const records: JournalRecord[] = [
      ...SAMPLE,
      { type: 'failed', instance: 'big', code: 'x', message: 'm'.repeat(600_000), at: 11 },
      ...Array.from({ length: 3_000 }, (_, i) => intent(i)),
    ];
    await writeAll(records);
    expect(await streamed()).toEqual((await readJournal(path)).records);
    expect(await streamed()).toEqual(records);
  });

  it('passes over the records of skipTypes, and only those', async () => {
    await writeAll(SAMPLE);
    const kept: JournalRecord[] = [];
    for await (const record of streamJournal(path, { skipTypes: ['downloaded', 'agent_session'] })) kept.push(record);
    expect(kept).toEqual(SAMPLE.filter((r) => r.type !== 'downloaded' && r.type !== 'agent_session'));
  });

  it('skips a corrupt line in the middle and a torn tail, and reads a missing file as empty', async () => {
    await writeAll([intent(1), intent(2), intent(3)]);
    const lines = (await readFile(path, 'latin1')).split('\n');
    lines[1] = lines[1]!.replace('seed=2', 'seed=9');
    await writeFile(
      path,
      `${lines.join('\n')}${encodeLine(JSON.stringify(intent(4)))
        .toString('latin1')
        .slice(0, 30)}`,
      'latin1',
    );
    expect(await streamed()).toEqual([intent(1), intent(3)]);
    await rm(path);
    expect(await streamed()).toEqual([]);
  });
});

describe('group commit', () => {
  it('1,000 concurrent durable appends cost exactly one write and one fdatasync, and all land in order', async () => {
    // Count the real fdatasync calls too, so that a JournalFile whose sync does nothing is caught.
    const probeHandle = await open(join(dir, 'probe'), 'w');
    const datasync = vi.spyOn(Object.getPrototypeOf(probeHandle) as FileHandle, 'datasync');
    await probeHandle.close();
    try {
      const probe = instrument();
      const journal = await Journal.open(path, { wrapFile: probe.wrap });
      expect(journal.created).toBe(true);
      const records = Array.from({ length: 1_000 }, (_, i) => intent(i));
      // Made in one tick, about 190 KB in all (under the 4 MB batch cap): one batch, so one write and one sync.
      await Promise.all(records.map((record) => journal.append(record, { durable: true })));
      expect(probe.syncs()).toBe(1);
      expect(probe.writes()).toBe(1);
      expect(datasync).toHaveBeenCalledTimes(1);
      expect(journal.stats).toEqual({ records: 1_000, writes: 1, syncs: 1 });
      // Nothing written since that sync: close has nothing to sync.
      await journal.close();
      expect(datasync).toHaveBeenCalledTimes(1);
      expect((await readJournal(path)).records).toEqual(records);
    } finally {
      datasync.mockRestore();
    }
  });

  it('appends that arrive while a sync is in flight share the next single write and sync', async () => {
    const probe = instrument();
    const journal = await Journal.open(path, { wrapFile: probe.wrap });
    const gate = probe.gate();
    let firstDone = false;
    const first = journal.append(intent(0), { durable: true }).then(() => (firstDone = true));
    await gate.entered;
    // Arrive one by one, each in its own tick, while the first sync is held.
    const later: Promise<void>[] = [];
    for (let i = 1; i < 1_000; i++) {
      later.push(journal.append(intent(i), { durable: true }));
      await Promise.resolve();
    }
    // A durable append has not resolved while its sync is still in flight.
    expect(firstDone).toBe(false);
    expect(probe.syncs()).toBe(1);
    gate.release();
    await Promise.all([first, ...later]);
    expect(probe.syncs()).toBe(2);
    expect(probe.writes()).toBe(2);
    await journal.close();
    expect((await readJournal(path)).records).toHaveLength(1_000);
  });

  it('non-durable appends are written without a sync; flush syncs them once', async () => {
    const probe = instrument();
    const journal = await Journal.open(path, { wrapFile: probe.wrap });
    for (let i = 0; i < 10; i++) await journal.append(intent(i));
    expect(probe.syncs()).toBe(0);
    expect((await readJournal(path)).records).toHaveLength(10);
    await journal.flush();
    expect(probe.syncs()).toBe(1);
    // Nothing new since: another flush has nothing to sync.
    await journal.flush();
    expect(probe.syncs()).toBe(1);
    await journal.close();
  });

  it('after a failed sync every pending and later append is refused', async () => {
    const journal = await Journal.open(path, {
      wrapFile: (file) => ({
        write: (d) => file.write(d),
        sync: () => Promise.reject(Object.assign(new Error('EIO: i/o error'), { code: 'EIO' })),
        close: () => file.close(),
      }),
    });
    const a = journal.append(intent(1), { durable: true });
    const b = journal.append(intent(2), { durable: true });
    await expect(a).rejects.toBeInstanceOf(JournalError);
    await expect(b).rejects.toThrow(/Could not write the journal/);
    await expect(journal.append(intent(3))).rejects.toThrow(/failed to write earlier/);
    await journal.close();
  });
});

describe('secrets never reach the journal (reliability.md #14)', () => {
  it('redacts a registered secret wherever it appears in a record, even one JSON would escape', async () => {
    const secret = 'sk-JOURNAL-5c1e9d7a3b2f4e6a8c0d';
    const quoted = 'hf"secret\\with-escapes-42';
    registerSecret(secret);
    registerSecret(quoted);
    const records: JournalRecord[] = [
      { type: 'failed', instance: 'x', code: 'unauthorized', message: `Authorization: Key id:${secret} was refused (${quoted})`, at: 1 },
      { type: 'status', instance: 'x', status: 'completed', outputs: [{ url: `https://cdn.gen.test/a.png?token=${secret}` }], at: 2 },
      { type: 'run_started', runId: 'r', pipeline: 'p', planHash: 'h', at: 3, [secret]: 'as a key' } as JournalRecord,
    ];
    await writeAll(records);
    const text = await readFile(path, 'utf8');
    expect(text).not.toContain(secret);
    expect(text).not.toContain(quoted);
    expect(text).not.toContain(JSON.stringify(quoted).slice(1, -1));
    // Two in the message, one in the URL, one as a key.
    expect(text.split('[REDACTED]').length - 1).toBe(4);
    const read = await readJournal(path);
    expect(read.corrupt).toEqual([]);
    expect(read.records).toHaveLength(3);
  });

  it('refuses, and writes nothing of, a record where a secret shows only across JSON syntax', async () => {
    // JSON.stringify puts `"message":"k9","zz-tail":1`: the secret spans a string's end and the next key.
    const spanning = 'k9","zz-tail';
    registerSecret(spanning);
    const journal = await Journal.open(path);
    const record = { type: 'failed', instance: 'x', code: 'c', message: 'k9', 'zz-tail': 1, at: 1 } as JournalRecord;
    await expect(journal.append(record)).rejects.toThrow(/contains a secret/);
    await journal.append(SAMPLE[0]!);
    await journal.close();
    const text = await readFile(path, 'utf8');
    expect(text).not.toContain('k9');
    expect((await readJournal(path)).records).toEqual([SAMPLE[0]]);
  });

  it('refuses a record that cannot be written as JSON (a cycle) with a JournalError', async () => {
    const journal = await Journal.open(path);
    const result: Record<string, unknown> = {};
    result.self = result;
    await expect(journal.append({ type: 'status', instance: 'x', status: 'completed', outputs: [], result, at: 1 })).rejects.toThrow(
      JournalError,
    );
    await journal.close();
    expect(await readFile(path, 'utf8')).toBe('');
  });

  it('a journal appended to by raw bytes (another writer) is still checked line by line', async () => {
    await writeAll(SAMPLE.slice(0, 2));
    await appendFile(path, 'garbage without newline');
    const result = await readJournal(path);
    expect(result.tornTail).toBe(true);
    expect(result.records).toEqual(SAMPLE.slice(0, 2));
  });
});
