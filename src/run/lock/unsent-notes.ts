/**
 * Intents a displaced holder never sent. A run's journal has one writer, so a
 * holder that finds, right after journaling an intent, that another process took the run over
 * sends nothing more and may not write the journal either: the new holder would read that intent
 * as "maybe sent" and leave a keyless instance unknown, never sent and never paid for. Instead the
 * old holder leaves a note beside the journal, `.unsent/<pid>-<tag>.jsonl`, one line per intent
 * it did not send (its instance, body hash and attempt), synced before it goes on.
 *
 * The holder that starts next reads the notes before it sends anything. A note that names an
 * instance's current intent (same body hash and attempt, nothing sent or ended after it) is
 * journaled as `refused` (`not_sent`), so the instance is sent as new; any other note is stale and
 * dropped. A note written after that read (the old holder was paused in between) is left for the
 * next start, where it still matches if the instance is still waiting on that intent: a note only
 * ever turns "unknown" into "not sent", and only for an intent whose POST never left.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { JournalRecord } from '../journal/journal-records.js';
import type { RunState } from '../journal/run-state.js';

/** The folder of the notes, in the run directory. */
export const UNSENT_DIR = '.unsent';

export interface UnsentNote {
  instance: string;
  bodyHash: string;
  /** The instance's retries and re-rolls when the intent was journaled: which attempt it was. */
  retries: number;
  rerolls: number;
}

/** This process's note file (one per process, so two writers never share one). */
const fileName = `${process.pid}-${randomBytes(4).toString('hex')}.jsonl`;

/** Appends a note and syncs it: the intent it names was journaled, and its POST never sent. */
export async function noteUnsent(runDir: string, note: UnsentNote): Promise<void> {
  const dir = join(runDir, UNSENT_DIR);
  await mkdir(dir, { recursive: true });
  const file = await open(join(dir, fileName), 'a', 0o600);
  try {
    await file.write(`${JSON.stringify(note)}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
}

/**
 * Journals, through `append`, a `refused` record for each noted intent that is still the
 * instance's current one, then removes the notes read. Returns how many intents it released.
 */
export async function releaseUnsent(
  runDir: string,
  state: RunState,
  append: (record: JournalRecord, durable: boolean) => Promise<void>,
): Promise<number> {
  const dir = join(runDir, UNSENT_DIR);
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => n.endsWith('.jsonl'));
  } catch {
    return 0;
  }
  const matching: string[] = [];
  for (const name of names) {
    const text = await readFile(join(dir, name), 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      const note = parseNote(line);
      if (note === undefined) continue;
      const entry = state.instances.get(note.instance);
      if (
        entry?.intent !== undefined &&
        entry.submission === undefined &&
        entry.final === undefined &&
        entry.failed === undefined &&
        entry.intent.bodyHash === note.bodyHash &&
        entry.retries === note.retries &&
        entry.rerolls === note.rerolls &&
        !matching.includes(note.instance)
      )
        matching.push(note.instance);
    }
  }
  for (const [i, instance] of matching.entries()) await append({ type: 'refused', instance, code: 'not_sent' }, i === matching.length - 1);
  for (const name of names) await unlink(join(dir, name)).catch(() => undefined);
  return matching.length;
}

function parseNote(line: string): UnsentNote | undefined {
  if (line.trim() === '') return undefined;
  try {
    const value = JSON.parse(line) as Partial<UnsentNote>;
    if (
      typeof value.instance === 'string' &&
      typeof value.bodyHash === 'string' &&
      typeof value.retries === 'number' &&
      typeof value.rerolls === 'number'
    )
      return value as UnsentNote;
  } catch {
    // A torn last line (the writer died as it wrote): nothing to release.
  }
  return undefined;
}
