import { GenpipeError, InvalidInputError } from '../api/errors.js';
import { redact } from '../util/redact.js';
import { EXIT, exitCodeFor } from './exit-codes.js';
import type { CliIO } from './io.js';

/**
 * How a command's failure reaches the user: an expected one as one sentence (a manifest's every
 * problem on its own line), a bug as one sentence too, with its stack only under GENPIPE_DEBUG=1.
 * Returns the exit code.
 */
export async function reportError(error: unknown, io: CliIO): Promise<number> {
  if (error instanceof GenpipeError) {
    io.err(`genpipe: ${error.message}`);
    if (error instanceof InvalidInputError) for (const issue of error.issues.slice(1)) io.err(`  ${issue.path}: ${issue.message}`);
    // Loaded only when there is a manifest error to print (the YAML loader comes with it).
    const { ManifestError, formatProblem } = await import('../manifest/errors.js');
    if (error instanceof ManifestError && error.problems.length > 1) for (const problem of error.problems) io.err(`  ${formatProblem(problem)}`);
    return exitCodeFor(error.code);
  }
  const message = error instanceof Error ? error.message : String(error);
  io.err(`genpipe: internal error: ${message} (this is a bug in genpipe; rerun with GENPIPE_DEBUG=1 for details).`);
  if (io.env.GENPIPE_DEBUG === '1' && error instanceof Error && error.stack) io.err(redact(error.stack));
  return EXIT.internal;
}
