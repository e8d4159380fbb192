/**
 * `genpipe run --reuse`: results of earlier runs of the same pipeline (under the same output root),
 * found by model and the exact request body they sent. A reused instance links the earlier files
 * into the new run, sends nothing and costs nothing. Idempotency keys belong to a run, so this is
 * the only way a run gets an earlier run's results: a choice the user makes.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { copyFile, link, mkdir, readdir, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import type { JournalRecordOf, OutputRef } from '../journal/journal-records.js';
import { replayFile } from '../journal/run-state.js';
import { runFile } from '../files/run-layout.js';

export interface ReusableResult {
  runId: string;
  runDir: string;
  model: string;
  bodyHash: string;
  outputs: OutputRef[];
  result: Record<string, unknown> | undefined;
  /** The earlier run's files, by output index. */
  files: JournalRecordOf<'downloaded'>[];
}

export class ReuseIndex {
  readonly #byInput = new Map<string, ReusableResult>();

  private constructor() {}

  /** Completed results across the pipeline's earlier runs (`pipelineDir/<run-id>/journal.jsonl`), newest run first. */
  static async build(pipelineDir: string, exceptRunDir: string): Promise<ReuseIndex> {
    const index = new ReuseIndex();
    const names = await readdir(pipelineDir, { withFileTypes: true }).catch(() => []);
    const runs = names
      .filter((d) => d.isDirectory() && !d.name.startsWith('.'))
      .map((d) => d.name)
      .sort()
      .reverse();
    for (const name of runs) {
      const runDir = join(pipelineDir, name);
      if (resolve(runDir) === resolve(exceptRunDir)) continue;
      const state = await replayFile(runFile(runDir, 'journal')).catch(() => undefined);
      if (!state) continue;
      for (const entry of state.instances.values()) {
        const final = entry.final;
        if (final?.status !== 'completed') continue;
        const input = entry.reusedInput ?? (entry.intent ? { model: entry.intent.model, bodyHash: entry.intent.bodyHash } : undefined);
        if (!input) continue;
        const files = final.outputs.map((_, i) => entry.downloads?.get(i));
        if (files.some((f) => f === undefined)) continue;
        const key = inputKey(input.model, input.bodyHash);
        if (index.#byInput.has(key)) continue;
        index.#byInput.set(key, {
          runId: state.runId ?? name,
          runDir,
          ...input,
          outputs: final.outputs,
          result: final.result,
          files: files as JournalRecordOf<'downloaded'>[],
        });
      }
    }
    return index;
  }

  get size(): number {
    return this.#byInput.size;
  }

  find(model: string, bodyHash: string): ReusableResult | undefined {
    return this.#byInput.get(inputKey(model, bodyHash));
  }
}

const inputKey = (model: string, bodyHash: string): string => `${model}\u0000${bodyHash}`;

/**
 * Puts an earlier run's file at `relativePath` in `runDir`: a hard link where the file system allows
 * one, else a copy. The earlier file must still have its journaled size and sha256 (it is checked),
 * and an existing destination must be that same file. Returns false when the earlier file is gone
 * or changed: the instance is then generated anew.
 */
export async function linkEarlierFile(
  from: ReusableResult,
  file: JournalRecordOf<'downloaded'>,
  runDir: string,
  relativePath: string,
): Promise<boolean> {
  const source = resolve(from.runDir, file.path);
  if (!source.startsWith(resolve(from.runDir) + sep)) return false;
  if ((await fileSha256(source)) !== file.sha256) return false;
  const target = resolve(runDir, relativePath);
  await mkdir(dirname(target), { recursive: true });
  try {
    await link(source, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // Left by a crash between the link and its journal record: the same file is fine; another is
    // never overwritten (the instance is generated anew, and its download refuses the clash).
    if (code === 'EEXIST') return (await fileSha256(target)) === file.sha256;
    // Another file system, or links not allowed: copy instead.
    await copyFile(source, target);
  }
  return true;
}

async function fileSha256(path: string): Promise<string | undefined> {
  const info = await stat(path).catch(() => undefined);
  if (!info?.isFile()) return undefined;
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
