/**
 * Sorting more lines than memory should hold: lines arrive as `key<TAB>payload` (a key holds no
 * tab); up to `chunk` of them are sorted in memory, and a longer input is cut into sorted runs
 * spilled to temporary files and merged, so memory stays bounded by the chunk whatever the input.
 * Equal keys keep their input order.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ByteSink } from './byte-sink.js';
import { linesOfFile } from './read-lines.js';

export const keyOfLine = (line: string): string => line.slice(0, line.indexOf('\t'));

interface Keyed {
  key: string;
  line: string;
  /** Which input position (in memory) or run (merging) it came from: ties go to the earlier. */
  order: number;
}

/** `decode`: the sort key of a line's raw key (by default the raw key itself), computed once per line. */
export async function* sortLines(
  lines: AsyncIterable<string> | Iterable<string>,
  compare: (a: string, b: string) => number,
  options: { chunk?: number; decode?: (rawKey: string) => string } = {},
): AsyncGenerator<string> {
  const limit = options.chunk ?? 100_000;
  const decode = options.decode ?? ((raw: string): string => raw);
  const runs: string[] = [];
  let dir: string | undefined;
  let batch: Keyed[] = [];
  const sortBatch = (): Keyed[] => batch.sort((a, b) => compare(a.key, b.key) || a.order - b.order);
  try {
    for await (const line of lines) {
      batch.push({ key: decode(keyOfLine(line)), line, order: batch.length });
      if (batch.length < limit) continue;
      dir ??= await mkdtemp(join(tmpdir(), 'genpipe-sort-'));
      runs.push(spillRun(sortBatch(), join(dir, `run-${runs.length}.txt`)));
      batch = [];
    }
    if (runs.length === 0) {
      for (const item of sortBatch()) yield item.line;
      return;
    }
    if (batch.length > 0) runs.push(spillRun(sortBatch(), join(dir as string, `run-${runs.length}.txt`)));
    batch = [];
    for (const { line } of mergeRuns(runs, compare, decode)) yield line;
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

const spillRun = (items: readonly Keyed[], path: string): string =>
  writeLinesFile(
    path,
    items.map((item) => item.line),
  );

/** Writes `lines` to a new file at `path`, each followed by a newline; returns the path. */
export function writeLinesFile(path: string, lines: Iterable<string>): string {
  const sink = new ByteSink(path);
  try {
    for (const line of lines) sink.add(`${line}\n`);
  } finally {
    sink.close();
  }
  return path;
}

/**
 * Most runs merged at once. Each open run holds a read buffer and the text decoded from it, so
 * more runs (a journal of millions of instances, read by two threads) are first merged in passes
 * of this many into longer runs, beside the first of each group: memory stays bounded whatever the
 * number of runs, for another pass over the data. (256 runs hold about 12 MB.)
 */
export const MAX_FAN_IN = 256;

/**
 * A k-way merge of sorted runs (files of `key<TAB>payload` lines): a binary heap on (key, run), so
 * equal keys come in run order. Each line comes with its decoded key, decoded once. Synchronous:
 * the runs are read 16 KB at a time (read-lines.ts). Over `fanIn` runs, consecutive groups of them
 * are merged first (MAX_FAN_IN), which keeps equal keys in run order too. With `from`, only the
 * lines whose key is `from` or after, each run read from there on (seekRun).
 */
export function* mergeRuns(
  paths: readonly string[],
  compare: (a: string, b: string) => number,
  decode: (rawKey: string) => string,
  options: { fanIn?: number; from?: string | undefined } = {},
): Generator<Readonly<{ key: string; line: string }>> {
  const runs = narrowRuns(paths, compare, decode, options.fanIn);
  const { from } = options;
  yield* mergeOnce(runs, compare, decode, from === undefined ? undefined : runs.map((run) => seekRun(run, from, compare, decode)));
}

/**
 * At most `fanIn` runs with the same lines: consecutive groups of runs merged into longer ones
 * (each written beside the group's first), pass after pass, so equal keys stay in run order.
 */
export function narrowRuns(
  paths: readonly string[],
  compare: (a: string, b: string) => number,
  decode: (rawKey: string) => string,
  fanIn = MAX_FAN_IN,
): readonly string[] {
  let runs = paths;
  const width = Math.max(2, fanIn);
  // Bounded: each pass divides the number of runs by `width` (at least two).
  for (let pass = 0; runs.length > width; pass++) {
    const next: string[] = [];
    for (let i = 0; i < runs.length; i += width) {
      const group = runs.slice(i, i + width);
      next.push(
        group.length === 1
          ? (group[0] as string)
          : writeLinesFile(`${group[0] as string}.pass-${pass}`, linesOf(mergeOnce(group, compare, decode))),
      );
    }
    runs = next;
  }
  return runs;
}

function* linesOf(merged: Iterable<{ line: string }>): Generator<string> {
  for (const { line } of merged) yield line;
}

/**
 * A run file read by byte offset, 4 KB at a time: where lines start, and the key of the line at an
 * offset (a key longer than 4 KB is read in several pieces).
 */
class RunFile {
  readonly #fd: number;
  readonly #buffer = Buffer.allocUnsafe(1 << 12);
  readonly size: number;

  constructor(
    readonly path: string,
    private readonly decode: (rawKey: string) => string,
  ) {
    this.#fd = openSync(path, 'r');
    this.size = fstatSync(this.#fd).size;
  }

  /** The start of the first line that starts at `at` or after, or the size. */
  lineStartFrom(at: number): number {
    if (at === 0) return 0;
    // Bounded: each turn moves 4 KB on, to the file's end.
    for (let p = at - 1; p < this.size; p += this.#buffer.length) {
      const read = readSync(this.#fd, this.#buffer, 0, this.#buffer.length, p);
      const newline = this.#buffer.subarray(0, read).indexOf(0x0a);
      if (newline !== -1) return p + newline + 1;
    }
    return this.size;
  }

  /** The decoded key of the line starting at `start`. */
  keyAt(start: number): string {
    const parts: Buffer[] = [];
    // Bounded: each turn moves 4 KB on, to the file's end.
    for (let p = start; p < this.size; p += this.#buffer.length) {
      const read = readSync(this.#fd, this.#buffer, 0, this.#buffer.length, p);
      const tab = this.#buffer.subarray(0, read).indexOf(0x09);
      if (tab !== -1) return this.decode(Buffer.concat([...parts, this.#buffer.subarray(0, tab)]).toString('utf8'));
      parts.push(Buffer.from(this.#buffer.subarray(0, read)));
    }
    throw new Error(`${this.path}: a line without a key at byte ${start}`);
  }

  close(): void {
    closeSync(this.#fd);
  }
}

/** Opens `path` as a RunFile for `use`, and closes it. */
function withRun<T>(path: string, decode: (rawKey: string) => string, use: (run: RunFile) => T): T {
  const run = new RunFile(path, decode);
  try {
    return use(run);
  } finally {
    run.close();
  }
}

/**
 * Where the first line of a sorted run whose key is `key` or after starts (the file's size when
 * none is): a binary search over byte offsets, then a scan of the last 4 KB.
 */
export function seekRun(path: string, key: string, compare: (a: string, b: string) => number, decode: (rawKey: string) => string): number {
  return withRun(path, decode, (run) => {
    // Invariant: every line starting before `lo` has a key before `key`; the line at `hi` (unless
    // hi is the size) does not. Bounded: each turn halves hi - lo, down to 4 KB.
    let lo = 0;
    let hi = run.size;
    while (hi - lo > 1 << 12) {
      const start = run.lineStartFrom(lo + Math.floor((hi - lo) / 2));
      if (start >= hi) break;
      if (compare(run.keyAt(start), key) < 0) lo = start + 1;
      else hi = start;
    }
    // The lines from lo's on, one at a time (bounded by hi).
    for (let start = run.lineStartFrom(lo); start < hi;) {
      if (compare(run.keyAt(start), key) >= 0) return start;
      start = run.lineStartFrom(start + 1);
    }
    return hi;
  });
}

/** The keys of a run's first line and of the first line from its middle byte on (undefined past its end). */
export function sampleRun(path: string, decode: (rawKey: string) => string): { first: string | undefined; middle: string | undefined } {
  return withRun(path, decode, (run) => {
    if (run.size === 0) return { first: undefined, middle: undefined };
    const middle = run.lineStartFrom(Math.floor(run.size / 2));
    return { first: run.keyAt(0), middle: middle < run.size ? run.keyAt(middle) : undefined };
  });
}

function* mergeOnce(
  paths: readonly string[],
  compare: (a: string, b: string) => number,
  decode: (rawKey: string) => string,
  starts?: readonly number[],
): Generator<Readonly<{ key: string; line: string }>> {
  const heap: (Keyed & { lines: Iterator<string> })[] = [];
  type Head = (typeof heap)[number];
  const before = (a: Head, b: Head): boolean => {
    const c = compare(a.key, b.key);
    return c < 0 || (c === 0 && a.order < b.order);
  };
  const swap = (i: number, j: number): void => {
    [heap[i], heap[j]] = [heap[j] as Head, heap[i] as Head];
  };
  const push = (h: Head): void => {
    heap.push(h);
    for (let i = heap.length - 1; i > 0;) {
      const p = (i - 1) >> 1;
      if (!before(heap[i] as Head, heap[p] as Head)) break;
      swap(i, p);
      i = p;
    }
  };
  const pop = (): Head => {
    const top = heap[0] as Head;
    const last = heap.pop() as Head;
    if (heap.length === 0) return top;
    heap[0] = last;
    for (let i = 0; ;) {
      const l = 2 * i + 1;
      let m = i;
      if (l < heap.length && before(heap[l] as Head, heap[m] as Head)) m = l;
      if (l + 1 < heap.length && before(heap[l + 1] as Head, heap[m] as Head)) m = l + 1;
      if (m === i) break;
      swap(i, m);
      i = m;
    }
    return top;
  };
  const advance = (order: number, lines: Iterator<string>): void => {
    const next = lines.next();
    if (!next.done) push({ key: decode(keyOfLine(next.value)), line: next.value, order, lines });
  };
  const iterators: Iterator<string>[] = [];
  try {
    for (const [i, path] of paths.entries()) iterators.push(linesOfFile(path, starts?.[i] ?? 0));
    for (const [order, lines] of iterators.entries()) advance(order, lines);
    // Bounded: every step consumes one line of one run.
    while (heap.length > 0) {
      const head = pop();
      yield head;
      advance(head.order, head.lines);
    }
  } finally {
    for (const lines of iterators) lines.return?.();
  }
}
