/**
 * `--state DIR`: the emulator's memory across restarts, as a service keeps its records across a
 * deploy. An append-only file, `DIR/emulator-state.jsonl`: each line is one JSON array of events
 * written by one synchronous change (a request with its charge and its Idempotency-Key, a
 * settlement with its refunds), so a line is all of a change or, torn by a kill, none of it. Lines
 * go to the kernel with one write each before the answer is sent: a killed emulator loses nothing it
 * answered (a power cut may lose the last lines; nothing is fsynced). This module knows only lines
 * and events; the stores write their own events and start-emulator.ts replays them.
 */
import { processAlive } from '../util/process-alive.js';
import {
  closeSync,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { GenpipeError } from '../api/errors.js';

/** One event of the state file: `t` names it, the rest is the store's own. */
export interface StateEvent {
  t: string;
  [field: string]: unknown;
}

export const STATE_FILE = 'emulator-state.jsonl';
const LOCK_FILE = 'emulator.lock';
const VERSION = 1;

export class StateJournal {
  readonly dir: string;
  readonly file: string;
  #fd: number | undefined;
  #batch: StateEvent[] | undefined;
  readonly #lock: string;

  private constructor(dir: string, fd: number, lock: string) {
    this.dir = dir;
    this.file = join(dir, STATE_FILE);
    this.#fd = fd;
    this.#lock = lock;
  }

  /**
   * Opens (creating it if needed) the state directory: takes its lock, reads every event written
   * so far, and drops a torn last line so that new lines start clean. Refuses, with a sentence
   * naming the place, a path that is not a directory, a directory another live emulator uses, and
   * a damaged line that is not the last.
   */
  static open(dir: string): { journal: StateJournal; events: StateEvent[] } {
    if (existsSync(dir) && !statSync(dir).isDirectory()) throw new GenpipeError('invalid_input', `--state ${dir}: not a directory.`);
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
    } catch (error) {
      throw new GenpipeError(
        'invalid_input',
        `Cannot create the state directory ${dir}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`,
      );
    }
    const lock = takeLock(dir);
    try {
      const file = join(dir, STATE_FILE);
      const data = existsSync(file) ? readFileSync(file) : Buffer.alloc(0);
      const { events, goodBytes } = parseState(data, file);
      const fd = openSync(file, 'a+', 0o600);
      if (goodBytes < data.length) ftruncateSync(fd, goodBytes);
      const journal = new StateJournal(dir, fd, lock);
      if (goodBytes === 0) journal.write({ t: 'header', version: VERSION });
      return { journal, events };
    } catch (error) {
      unlinkSync(lock);
      throw error;
    }
  }

  /** Writes one event now, or with the rest of the current transaction. */
  write(event: StateEvent): void {
    if (this.#batch) this.#batch.push(event);
    else this.#append([event]);
  }

  /** Runs `fn` (synchronous) and writes every event it wrote as one line. */
  transaction<T>(fn: () => T): T {
    if (this.#batch) return fn();
    this.#batch = [];
    try {
      return fn();
    } finally {
      const events = this.#batch;
      this.#batch = undefined;
      if (events.length > 0) this.#append(events);
    }
  }

  #append(events: StateEvent[]): void {
    if (this.#fd === undefined) return;
    writeSync(this.#fd, `${JSON.stringify(events)}\n`);
  }

  close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
    try {
      unlinkSync(this.#lock);
    } catch {
      // Already gone: nothing to release.
    }
  }
}

/** The events of a state file; a torn last line (no newline, or not JSON) is left out. */
export function parseState(data: Buffer, file: string): { events: StateEvent[]; goodBytes: number } {
  const events: StateEvent[] = [];
  let start = 0;
  let line = 0;
  while (start < data.length) {
    const end = data.indexOf(0x0a, start);
    line++;
    const last = end < 0 || end === data.length - 1;
    const text = data.subarray(start, end < 0 ? data.length : end).toString('utf8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const ok = Array.isArray(parsed) && parsed.every((e) => typeof e === 'object' && e !== null && typeof (e as StateEvent).t === 'string');
    if (!ok || end < 0) {
      // A kill mid-write tears only the last line; anything else is damage we must not guess past.
      if (last) return { events, goodBytes: start };
      throw new GenpipeError(
        'invalid_input',
        `Invalid emulator state: ${file}:${line}: not a line of the emulator's state file; move the directory away to start afresh.`,
      );
    }
    for (const event of parsed as StateEvent[]) {
      if (event.t === 'header' && event.version !== VERSION) {
        throw new GenpipeError(
          'invalid_input',
          `Invalid emulator state: ${file}:${line}: state format version ${String(event.version)}, this emulator reads version ${VERSION}.`,
        );
      }
      if (event.t !== 'header') events.push(event);
    }
    start = end + 1;
  }
  return { events, goodBytes: data.length };
}

/** An exclusive lock file holding our pid; a lock left by a dead process is taken over. */
function takeLock(dir: string): string {
  const path = join(dir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      return path;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new GenpipeError(
          'invalid_input',
          `Cannot lock the state directory ${dir}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`,
        );
      }
      const pid = Number(readFileSync(path, 'utf8').trim());
      if (Number.isInteger(pid) && pid > 0 && processAlive(pid)) {
        throw new GenpipeError('invalid_input', `--state ${dir}: another emulator (pid ${pid}) is using this state directory.`);
      }
      unlinkSync(path);
    }
  }
  throw new GenpipeError('invalid_input', `--state ${dir}: could not take the lock ${path}.`);
}
