/**
 * A disk that refuses a write (full, over its quota, read-only, failing) is the user's to fix, not
 * a bug: whichever writer met it (the journal, outputs.csv, a lock file, the report, the gallery,
 * a thumbnail), the command ends with one sentence naming the folder and the space left there,
 * and exit code 6. The mapping is made once, where an error leaves a command, so no writer needs
 * its own: a write on an open file names no path, so the folder is the one the command said it
 * writes (setWritingFolder), else the path the error names.
 */
import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import { GenpipeError } from '../api/errors.js';
import { formatBytes } from '../util/format-bytes.js';

/** What each refusal says of the folder's disk. */
const REFUSALS: Readonly<Record<string, string>> = {
  ENOSPC: 'its disk is full',
  EDQUOT: 'its disk quota is used up',
  EROFS: 'its file system is read-only',
  EIO: 'its disk failed to write (an I/O error)',
};

let writingFolder: string | undefined;

/** The folder the command writes from now on (a run directory, or the pipeline's folder before it exists). */
export function setWritingFolder(folder: string): void {
  writingFolder = folder;
}

/** The errno error behind `error` (itself, a cause, or one of an AggregateError's) when it is a disk refusal. */
export function diskErrnoOf(error: unknown, depth = 0): NodeJS.ErrnoException | undefined {
  if (!(error instanceof Error) || depth > 8) return undefined;
  const code = (error as NodeJS.ErrnoException).code;
  if (typeof code === 'string' && Object.hasOwn(REFUSALS, code)) return error as NodeJS.ErrnoException;
  if (error instanceof AggregateError)
    for (const inner of error.errors) {
      const found = diskErrnoOf(inner, depth + 1);
      if (found) return found;
    }
  return diskErrnoOf(error.cause, depth + 1);
}

/**
 * `error` as the one sentence of a disk refusal (code `disk`, exit 6), or undefined when it is not
 * one. An error genpipe already explained (any code but `internal`) keeps its own words.
 */
export function diskRefusal(error: unknown): GenpipeError | undefined {
  if (error instanceof GenpipeError && error.code !== 'internal') return undefined;
  const errno = diskErrnoOf(error);
  if (errno?.code === undefined) return undefined;
  const folder =
    writingFolder ?? (typeof errno.path === 'string' ? (errno.syscall === 'mkdir' ? errno.path : dirname(errno.path)) : process.cwd());
  const free = freeBytes(folder);
  const left = free === undefined ? '' : `, ${formatBytes(free)} free`;
  return new GenpipeError(
    'disk',
    `Could not write to ${folder}: ${REFUSALS[errno.code]} (${errno.code} on ${errno.syscall ?? 'write'}${left}). Make room there (or fix the disk), then run the command again; \`genpipe resume\` continues a run where it stopped, paying for nothing twice.`,
    { cause: error },
  );
}

/** Bytes an unprivileged writer may still use on the folder's file system (or its nearest existing parent). */
function freeBytes(folder: string): number | undefined {
  for (let at = folder, i = 0; i < 64; at = dirname(at), i++) {
    try {
      const stats = statfsSync(at);
      return stats.bavail * stats.bsize;
    } catch {
      if (dirname(at) === at) return undefined;
    }
  }
  return undefined;
}
