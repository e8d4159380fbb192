/**
 * Sorting more lines than memory should hold: lines arrive as `key<TAB>payload` (a key holds no
 * tab); up to `chunk` of them are sorted in memory, and a longer input is cut into sorted runs
 * spilled to temporary files and merged, so memory stays bounded by the chunk whatever the input.
 * Equal keys keep their input order.
 */
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
export async function* sortLines(lines: AsyncIterable<string> | Iterable<string>, compare: (a: string, b: string) => number, options: { chunk?: number; decode?: (rawKey: string) => string } = {}): AsyncGenerator<string> {
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

const spillRun = (items: readonly Keyed[], path: string): string => writeLinesFile(path, items.map((item) => item.line));

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
 * number of runs, for another pass over the data. (256 runs hold about 32 MB.)
 */
export const MAX_FAN_IN = 256;

/**
 * A k-way merge of sorted runs (files of `key<TAB>payload` lines): a binary heap on (key, run), so
 * equal keys come in run order. Each line comes with its decoded key, decoded once. Synchronous:
 * the runs are read 64 KB at a time (read-lines.ts). Over `fanIn` runs, consecutive groups of them
 * are merged first (MAX_FAN_IN), which keeps equal keys in run order too.
 */
export function* mergeRuns(paths: readonly string[], compare: (a: string, b: string) => number, decode: (rawKey: string) => string, fanIn = MAX_FAN_IN): Generator<Readonly<{ key: string; line: string }>> {
  let runs = paths;
  const width = Math.max(2, fanIn);
  // Bounded: each pass divides the number of runs by `width` (at least two).
  for (let pass = 0; runs.length > width; pass++) {
    const next: string[] = [];
    for (let i = 0; i < runs.length; i += width) {
      const group = runs.slice(i, i + width);
      next.push(group.length === 1 ? (group[0] as string) : writeLinesFile(`${group[0] as string}.pass-${pass}`, linesOf(mergeOnce(group, compare, decode))));
    }
    runs = next;
  }
  yield* mergeOnce(runs, compare, decode);
}

function* linesOf(merged: Iterable<{ line: string }>): Generator<string> {
  for (const { line } of merged) yield line;
}

function* mergeOnce(paths: readonly string[], compare: (a: string, b: string) => number, decode: (rawKey: string) => string): Generator<Readonly<{ key: string; line: string }>> {
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
    for (let i = heap.length - 1; i > 0; ) {
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
    for (let i = 0; ; ) {
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
    for (const path of paths) iterators.push(linesOfFile(path));
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
