import { GenpipeError, InvalidInputError } from '../api/errors.js';
import { redact } from '../util/redact.js';
import { oneLine } from '../util/terminal-text.js';
import { EXIT, exitCodeFor } from './exit-codes.js';
import type { CliIO } from './io.js';

/**
 * How a command's failure reaches the user: an expected one as one sentence (a manifest's every
 * problem on its own line), a bug as one sentence too, with its stack only under GENPIPE_DEBUG=1.
 * Returns the exit code.
 */
export async function reportError(error: unknown, io: CliIO): Promise<number> {
  if (error instanceof GenpipeError) {
    // A message can quote the service or a manifest: each stays on its one line.
    io.err(`genpipe: ${oneLine(error.message)}`);
    if (error instanceof InvalidInputError) for (const issue of error.issues.slice(1)) io.err(`  ${oneLine(`${issue.path}: ${issue.message}`)}`);
    // Loaded only when there is a manifest error to print (the YAML loader comes with it).
    const { ManifestError, formatProblem } = await import('../manifest/errors.js');
    if (error instanceof ManifestError && error.problems.length > 1) for (const problem of error.problems) io.err(`  ${oneLine(formatProblem(problem))}`);
    return exitCodeFor(error.code);
  }
  const layout = fileLayoutProblem(error);
  if (layout !== undefined) {
    io.err(`genpipe: ${layout}`);
    return EXIT.invalidInput;
  }
  const message = error instanceof Error ? error.message : String(error);
  io.err(`genpipe: internal error: ${oneLine(message)} (this is a bug in genpipe; rerun with GENPIPE_DEBUG=1 for details).`);
  if (io.env.GENPIPE_DEBUG === '1' && error instanceof Error && error.stack) io.err(redact(error.stack));
  return EXIT.internal;
}

/** What each file-system refusal says about the files genpipe was given. */
const LAYOUT_CODES: Record<string, string> = {
  EISDIR: 'is a folder where genpipe reads or writes a file',
  ENOTDIR: 'has a file where genpipe expects a folder',
  EACCES: 'may not be read or written by genpipe (permissions)',
  EPERM: 'may not be read or written by genpipe (permissions)',
  ELOOP: 'is a loop of symbolic links',
};

/**
 * A damaged or foreign run directory (a folder named report.json, a file named outputs) is the
 * user's to fix, not a bug: one sentence naming the path, exit 2. Only these codes, and only with
 * a path: anything else unexpected stays an internal error.
 */
function fileLayoutProblem(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const e = error as NodeJS.ErrnoException & { dest?: string };
  const what = e.code === undefined ? undefined : LAYOUT_CODES[e.code];
  if (what === undefined || typeof e.path !== 'string') return undefined;
  const path = e.syscall === 'rename' && typeof e.dest === 'string' ? e.dest : e.path;
  return `${path} ${what} (${e.code} on ${e.syscall ?? 'access'}); fix or remove it.`;
}
