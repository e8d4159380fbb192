/**
 * A corrupt journal line that is not the torn tail (reliability.md #20): resuming past it
 * is refused unless accepted, and an accepted line names the instance it belongs to only when the
 * checksum proves it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GenpipeError } from '../../../src/api/errors.js';
import { EXIT, exitCodeFor } from '../../../src/session/exit-codes.js';
import {
  CorruptJournalError,
  damagedLineInstance,
  encodeLine,
  Journal,
  readJournal,
  singleByteRepairs,
  type CorruptLine,
} from '../../../src/run/journal/journal.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';

const HASH = 'b'.repeat(64);
let dir: string;
let path: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'genpipe-journal-corrupt-'));
  path = join(dir, 'journal.jsonl');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const started: JournalRecord = { type: 'run_started', runId: 'run-1', pipeline: 'demo', planHash: 'p1', at: 1 };
/** An intent of a model without an Idempotency-Key: losing it is what pays twice. */
const keyless = (instance: string, at = 2): JournalRecord => ({
  type: 'intent',
  instance,
  model: 'speak',
  idempotencyKey: null,
  bodyHash: HASH,
  at,
});
const submitted = (instance: string, at = 3): JournalRecord => ({
  type: 'submitted',
  instance,
  handle: { kind: 'request', requestId: `r-${at}` },
  at,
});

function lines(records: readonly JournalRecord[]): Buffer[] {
  return records.map((record) => encodeLine(JSON.stringify(record)));
}

/** `line` with `xor` applied to the byte where `needle` starts, plus `shift`. */
function flip(line: Buffer, needle: string, shift = 0, xor = 0x01): Buffer {
  const at = line.indexOf(needle);
  expect(at).toBeGreaterThanOrEqual(0);
  const out = Buffer.from(line);
  out[at + shift] = out[at + shift]! ^ xor;
  return out;
}

/** Writes `parts` as the journal and returns its bytes. */
async function journalOf(...parts: Buffer[]): Promise<Buffer> {
  const data = Buffer.concat(parts);
  await writeFile(path, data);
  return data;
}

async function refusal(options: Parameters<typeof Journal.open>[1] = {}): Promise<CorruptJournalError> {
  const error: unknown = await Journal.open(path, options).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(CorruptJournalError);
  return error as CorruptJournalError;
}

describe('resume refuses a journal with a corrupt line that is not the torn tail', () => {
  it('a flipped byte in an unanswered keyless intent: refused with exit 2, naming the file and line, and the file is left byte for byte', async () => {
    const [a, b, c] = lines([started, keyless('speak[line=2]'), submitted('other')]);
    const before = await journalOf(a!, flip(b!, '"speak"', 2), c!);
    const error = await refusal();
    expect(error).toBeInstanceOf(GenpipeError);
    expect(error.code).toBe('invalid_input');
    expect(exitCodeFor(error.code)).toBe(EXIT.invalidInput);
    expect(EXIT.invalidInput).toBe(2);
    expect(error.message).toBe(
      `The journal ${path} may be damaged: line 2 (checksum mismatch) is corrupt and not a torn last write, and resuming past a lost record could pay twice for its instance, so nothing was resumed; --accept-corrupt resumes anyway, treating every instance a corrupt line could belong to as unknown, never as new.`,
    );
    expect(error.path).toBe(path);
    expect(error.corrupt).toEqual([{ line: 2, reason: 'checksum mismatch', instance: 'speak[line=2]' }]);
    expect((await readFile(path)).equals(before)).toBe(true);
  });

  it('refuses before cutting a torn tail or appending anything: the file is byte-identical after', async () => {
    const [a, b, c, d] = lines([started, keyless('speak[line=2]'), submitted('other'), keyless('speak[line=3]')]);
    // A corrupt middle line and a torn last line, which an accepted open would cut off.
    const before = await journalOf(a!, flip(b!, 'speak[line=2]', 0, 0x20), c!, d!.subarray(0, 40));
    const seen: CorruptLine[] = [];
    const error = await refusal({ onRecord: () => {}, onCorrupt: (corrupt) => seen.push(corrupt) });
    expect(error.message).toContain(`The journal ${path} may be damaged: line 2 `);
    expect((await readFile(path)).equals(before)).toBe(true);
    // Told only when accepted: a refused open hands out nothing to mark.
    expect(seen).toEqual([]);
    // And again: refusing is not a one-off that a second attempt gets past.
    await refusal();
    expect((await readFile(path)).equals(before)).toBe(true);
  });

  it('names the first five lines and counts the rest', async () => {
    const records = Array.from({ length: 16 }, (_, i) => keyless(`speak[line=${i}]`, 10 + i));
    const parts = lines(records).map((line, i) => (i % 2 === 1 && i < 15 ? flip(line, '"speak"', 3) : line));
    await journalOf(...parts);
    const error = await refusal();
    expect(error.corrupt.map((c) => c.line)).toEqual([2, 4, 6, 8, 10, 12, 14]);
    expect(error.message).toContain(
      `may be damaged: lines 2 (checksum mismatch), 4 (checksum mismatch), 6 (checksum mismatch), 8 (checksum mismatch), 10 (checksum mismatch) and 2 more are corrupt and not a torn last write`,
    );
  });

  it('two corrupt lines are joined with "and"', async () => {
    const [a, b, c] = lines([started, keyless('speak[line=2]'), keyless('speak[line=3]')]);
    await journalOf(a!, Buffer.from('not a journal line\n'), b!, encodeLine(JSON.stringify({ type: 'from_the_future' })), c!);
    const error = await refusal();
    expect(error.message).toContain(`lines 2 (malformed checksum prefix) and 4 (unknown record type "from_the_future") are corrupt`);
  });

  it('a complete last line that is corrupt without being torn (checksum right, record unknown) is refused too', async () => {
    const [a] = lines([started]);
    await journalOf(a!, encodeLine(JSON.stringify({ type: 'from_the_future', instance: 'speak[line=9]' })));
    expect((await refusal()).corrupt).toEqual([{ line: 2, reason: 'unknown record type "from_the_future"', instance: 'speak[line=9]' }]);
  });

  it('a torn tail alone is no reason to refuse: it is cut off and the journal opens', async () => {
    const [a, b, c] = lines([started, keyless('speak[line=2]'), submitted('speak[line=2]')]);
    // Cut short: no newline (a flipped byte on a complete line would be damage, see journal.test.ts).
    await journalOf(a!, b!, c!.subarray(0, 40));
    const journal = await Journal.open(path);
    expect(journal.recovered).toMatchObject({ tornTail: true, corrupt: [] });
    await journal.close();
    expect(await readFile(path)).toEqual(Buffer.concat([a!, b!]));
  });
});

describe('--accept-corrupt: each corrupt line is handed over with the instance it provably belongs to', () => {
  it('opens, reports the line and its instance in file order among the records, cuts the torn tail and leaves the damage in place', async () => {
    const [a, b, c, d] = lines([started, keyless('speak[line=2]'), submitted('other'), keyless('speak[line=3]')]);
    const damaged = flip(b!, HASH, 10);
    await journalOf(a!, damaged, c!, d!.subarray(0, 40));
    const events: string[] = [];
    const journal = await Journal.open(path, {
      acceptCorrupt: true,
      onRecord: (record) => events.push(record.type),
      onCorrupt: (corrupt) => events.push(`corrupt ${corrupt.line} ${corrupt.instance ?? '(any)'}`),
    });
    expect(events).toEqual(['run_started', 'corrupt 2 speak[line=2]', 'submitted']);
    expect(journal.recovered).toMatchObject({
      tornTail: true,
      corrupt: [{ line: 2, reason: 'checksum mismatch', instance: 'speak[line=2]' }],
    });
    await journal.append(keyless('speak[line=4]', 5), { durable: true });
    await journal.close();
    const after = await readFile(path);
    expect(after.subarray(0, a!.length + damaged.length + c!.length)).toEqual(Buffer.concat([a!, damaged, c!]));
    // Nothing records the acceptance: the next resume meets the same damage and must accept it again.
    const again = await refusal();
    expect(again.corrupt).toEqual([{ line: 2, reason: 'checksum mismatch', instance: 'speak[line=2]' }]);
    const seen: CorruptLine[] = [];
    const reopened = await Journal.open(path, { acceptCorrupt: true, onCorrupt: (corrupt) => seen.push(corrupt) });
    await reopened.close();
    expect(seen).toEqual(again.corrupt);
    expect((await readFile(path)).equals(after)).toBe(true);
  });

  it('a flipped byte inside the id, which still reads as another plausible id, names the real instance', async () => {
    const [a, b] = lines([started, keyless('speak[line=1]')]);
    // '1' ^ 0x02 is '3': a regex would read speak[line=3], another instance of the plan.
    const damaged = flip(b!, 'speak[line=1]', 11, 0x02);
    expect(damaged.toString()).toContain('"instance":"speak[line=3]"');
    await journalOf(a!, damaged, a!);
    const seen: CorruptLine[] = [];
    await (await Journal.open(path, { acceptCorrupt: true, onCorrupt: (corrupt) => seen.push(corrupt) })).close();
    expect(seen).toEqual([{ line: 2, reason: 'checksum mismatch', instance: 'speak[line=1]' }]);
  });

  it('a damaged checksum digit or separator leaves the record readable, and names its instance', async () => {
    const [b] = lines([keyless('speak[line=2]')]);
    expect(damagedLineInstance(flip(b!, b!.subarray(0, 8).toString(), 3, 0x7f).subarray(0, -1))).toBe('speak[line=2]');
    expect(damagedLineInstance(flip(b!, ' {', 0, 0x40).subarray(0, -1))).toBe('speak[line=2]');
  });

  it('a line whose checksum is right but this version cannot use names the instance it carries', () => {
    const unknown = encodeLine(JSON.stringify({ type: 'from_the_future', instance: 'sheets[tier="a b",seed=2]' }));
    expect(damagedLineInstance(unknown.subarray(0, -1))).toBe('sheets[tier="a b",seed=2]');
    const invalid = encodeLine(JSON.stringify({ type: 'intent', instance: 'sheets[seed=2]' }));
    expect(damagedLineInstance(invalid.subarray(0, -1))).toBe('sheets[seed=2]');
    const notJson = encodeLine('{"type":"intent","instance":"sheets[seed=\\"x\\"]",');
    expect(damagedLineInstance(notJson.subarray(0, -1))).toBe('sheets[seed="x"]');
    // Not an id a plan makes (a step id is lowercase): no instance.
    expect(
      damagedLineInstance(encodeLine(JSON.stringify({ type: 'from_the_future', instance: 'Not An Id' })).subarray(0, -1)),
    ).toBeUndefined();
  });

  it('when the damage cannot be pinned to one byte, the line could be any instance: instance is absent', async () => {
    const [a, b, c] = lines([started, keyless('speak[line=2]'), keyless('speak[line=3]')]);
    const twoBytes = flip(flip(b!, 'speak[line=2]', 11), 'speak', 0, 0x02);
    const zeros = Buffer.concat([Buffer.alloc(b!.length - 1), Buffer.from('\n')]);
    // A newline turned into another byte: two records on one line.
    const merged = flip(Buffer.concat([b!, c!]), '\n');
    // A byte turned into a newline: one record cut in two.
    const cut = flip(b!, 'speak[line=2]', 5, 0x0a ^ 0x5b);
    await journalOf(a!, twoBytes, zeros, merged, cut, a!);
    const seen: CorruptLine[] = [];
    await (await Journal.open(path, { acceptCorrupt: true, onCorrupt: (corrupt) => seen.push(corrupt) })).close();
    expect(seen.map((s) => s.line)).toEqual([2, 3, 4, 5, 6]);
    for (const corrupt of seen) expect(corrupt).not.toHaveProperty('instance');
    expect(twoBytes.toString()).toContain('"instance":"'); // the text still looks like an id; it is not trusted
  });

  it('a damaged record of a type that names no instance gives no instance', async () => {
    const [a, b] = lines([started, keyless('speak[line=2]')]);
    await journalOf(flip(a!, '"demo"', 2), b!);
    const journal = await Journal.open(path, { acceptCorrupt: true });
    expect(journal.recovered.corrupt).toEqual([{ line: 1, reason: 'checksum mismatch' }]);
    await journal.close();
  });

  it('readJournal reports the same instances (no accepting needed to read)', async () => {
    const [a, b] = lines([started, keyless('speak[line=2]')]);
    await journalOf(flip(b!, HASH, 0), a!);
    expect((await readJournal(path)).corrupt).toEqual([{ line: 1, reason: 'checksum mismatch', instance: 'speak[line=2]' }]);
  });
});

describe('singleByteRepairs', () => {
  it('finds the changed byte at every position of a line, whatever it was changed to', () => {
    for (const length of [1, 2, 7, 64, 333]) {
      const body = randomBytes(length);
      const expected = crc32(body);
      expect(singleByteRepairs(body, expected)).toEqual([]);
      for (let position = 0; position < length; position++) {
        const xor = 1 + (randomBytes(1)[0]! % 255);
        const damaged = Buffer.from(body);
        damaged[position] = damaged[position]! ^ xor;
        expect(singleByteRepairs(damaged, expected)).toContainEqual({ position, xor });
      }
    }
  });
});
