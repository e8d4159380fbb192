import { parseArgs } from 'node:util';
import { baseUrlOrigin } from '../api/config.js';
import { GenpipeError, InvalidInputError, type ErrorCode } from '../api/errors.js';
import { redact } from '../util/redact.js';
import { oneLine } from '../util/terminal-text.js';
import { EXIT, exitCodeFor } from '../session/exit-codes.js';
import { diskRefusal } from '../session/disk-refusal.js';
import type { CliIO } from './io.js';

/**
 * How a command's failure reaches the user: an expected one as one sentence (a manifest's every
 * problem on its own line), a bug as one sentence too, with its stack only under GENPIPE_DEBUG=1.
 * Returns the exit code.
 */
export async function reportError(error: unknown, io: CliIO, argv: readonly string[] = []): Promise<number> {
  error = diskRefusal(error) ?? error;
  if (error instanceof GenpipeError) {
    // Only a request to the service (the transport names its method and path), not Redis or a notify hook.
    const hint = UNREACHABLE.has(error.code) && SERVICE_REQUEST.test(error.message) ? unreachableServiceHint(argv, io.env) : '';
    // A message can quote the service or a manifest: each stays on its one line.
    io.err(`genpipe: ${oneLine(error.message)}${hint}`);
    if (error instanceof InvalidInputError)
      for (const issue of error.issues.slice(1)) io.err(`  ${oneLine(`${issue.path}: ${issue.message}`)}`);
    // Loaded only when there is a manifest error to print (the YAML loader comes with it).
    const { ManifestError, formatProblem } = await import('../manifest/errors.js');
    if (error instanceof ManifestError && error.problems.length > 1)
      for (const problem of error.problems) io.err(`  ${oneLine(formatProblem(problem))}`);
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

/** Failures to reach the service at all (not answers from it). */
const UNREACHABLE: ReadonlySet<ErrorCode> = new Set(['network', 'timeout']);
/** How the transport words a request that failed: `GET /x failed: …`, `POST /y timed out.` */
const SERVICE_REQUEST = /^(GET|POST|PUT|DELETE|PATCH|HEAD) \//;

/**
 * After "GET /x failed: ECONNREFUSED": which address genpipe tried and where that came from (a
 * flag, the environment or the config file), and how to set another. The transport names only the
 * path; the command's own flags say where the address came from.
 */
export function unreachableServiceHint(argv: readonly string[], env: NodeJS.ProcessEnv): string {
  const how = 'set the address with --base-url, GENPIPE_BASE_URL or base_url in the config file (--config or GENPIPE_CONFIG)';
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args: [...argv],
      options: { 'base-url': { type: 'string' }, config: { type: 'string' }, emulator: { type: 'boolean' } },
      strict: false,
      allowPositionals: true,
    }).values;
  } catch {
    return '';
  }
  if (values.emulator === true) return '';
  const str = (key: string): string | undefined => (typeof values[key] === 'string' ? (values[key] as string) : undefined);
  let origin: { url: string; from: string } | undefined;
  try {
    origin = baseUrlOrigin({ baseUrl: str('base-url'), config: str('config') }, env);
  } catch {
    origin = undefined;
  }
  // A resume with no address set uses the one its run recorded in plan.json.
  if (!origin) return ` The service could not be reached; ${how}.`;
  return ` The service at ${redact(origin.url)} (from ${origin.from}) could not be reached: check that it runs there, or ${how}.`;
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
