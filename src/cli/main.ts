/**
 * The genpipe command line: a thin shell that parses arguments, calls the library and returns an
 * exit code. Expected failures print one sentence; only a bug prints more, and only with
 * GENPIPE_DEBUG=1.
 */
import { setFlagsFromString } from 'node:v8';
import { GenpipeError } from '../api/errors.js';
import { COMMANDS } from './command-list.js';
import { EXIT } from '../session/exit-codes.js';
import { processIO, type CliIO } from './io.js';
import { reportError as report } from './report-error.js';
import { nearest } from '../util/suggest.js';
import { runHardExitHooks } from '../util/exit-hooks.js';

export const VERSION = '0.1.0';

export { COMMANDS } from './command-list.js';

export function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `genpipe ${VERSION}: run YAML pipeline manifests against the Generation Service API.

Usage: genpipe <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

Run "genpipe help <command>" (or "genpipe <command> --help") for a command's options,
"genpipe version" (or -V) for the version.
Exit codes: 0 ok, 1 failed, 2 invalid input, 3 budget reached, 4 locked,
            5 service unavailable or credentials refused, 70 internal error, 130 interrupted.`;
}

/**
 * How far V8 lets the heap grow past what was live at the last full collection before the next
 * one, for the commands that run a pipeline: 1.5x. Left to itself V8 picks up to 4x when a process
 * allocates fast, as a run does: a 100,000-instance run held about 70 MB live yet peaked at 457 MB
 * of RSS; with 1.5x about 270 MB, in the same wall time. V8 reads the flag at each
 * collection, so setting it at start-up works without a command-line flag. Short commands keep
 * V8's choice: the report of a million instances took a fifth longer with it, under its memory
 * target either way.
 */
const HEAP_GROWING_PERCENT = 50;
const BOUNDED_HEAP: ReadonlySet<string> = new Set(['run', 'resume', 'worker']);

function boundHeapGrowth(): void {
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}

/** Runs genpipe with `argv` (without node and the script) and returns the exit code. */
export async function main(argv: readonly string[], io?: CliIO): Promise<number> {
  const controller = new AbortController();
  const ownIO = io === undefined;
  const theIO = io ?? processIO(controller.signal);
  let forced: NodeJS.Timeout | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    // A second Ctrl-C, or a stop that is taking too long (a Redis or a service that never
    // answers): the process ends now. What a run has journaled is synced as it is written, so it
    // stays resumable.
    if (controller.signal.aborted) return hardExit(signal, theIO);
    controller.abort(new Error('interrupted'));
    forced = setTimeout(() => hardExit(signal, theIO), STOP_GRACE_MS);
    forced.unref();
  };
  if (ownIO) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    process.stdout.on('error', onStdoutError);
  }
  let code: number | undefined;
  try {
    code = await dispatch(argv, theIO, ownIO);
    return code;
  } catch (error) {
    code = await report(error, theIO, argv);
    return code;
  } finally {
    if (ownIO) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // The command has answered and said so: a connection still open to a server that stopped
      // answering (a paused Redis) must not hold the process. Unref'd: a process with nothing
      // left ends before it fires; stdout and stderr to pipes and files are written synchronously.
      const exitCode = code ?? EXIT.internal;
      setTimeout(() => process.exit(exitCode), LINGER_MS).unref();
    }
  }
}

/** How long a process may linger once its command has answered (open handles to a stuck server). */
const LINGER_MS = 2_000;

/** How long a stop may take after Ctrl-C or SIGTERM before the process ends regardless. */
export const STOP_GRACE_MS = 4_000;

/** Ends the process at once: 130 after SIGINT, 143 (128 + 15) after SIGTERM, as a shell reports them. */
function hardExit(signal: NodeJS.Signals, io: CliIO): never {
  // A run's own hook says what it skipped and releases its lock; without one, this line says it.
  if (!runHardExitHooks())
    io.err(`genpipe: stopped (${signal}) before it could finish stopping; what was journaled is kept: \`genpipe resume\` a run directory.`);
  process.exit(signal === 'SIGTERM' ? 143 : EXIT.interrupted);
}

async function dispatch(argv: readonly string[], io: CliIO, ownProcess: boolean): Promise<number> {
  const [name, ...rest] = argv;
  if (name === 'help' && rest[0] !== undefined) {
    // `genpipe help run`: the command's own help, as `genpipe run --help` prints it.
    io.out((await commandNamed(rest[0]).load()).help);
    return EXIT.ok;
  }
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.out(usage());
    return name === undefined ? EXIT.invalidInput : EXIT.ok;
  }
  if (name === '--version' || name === '-v' || name === '-V' || name === 'version') {
    io.out(VERSION);
    return EXIT.ok;
  }
  const command = await commandNamed(name).load();
  outliveStdout = OUTLIVE_STDOUT.has(command.name);
  if (ownProcess && BOUNDED_HEAP.has(command.name)) boundHeapGrowth();
  if (rest.includes('--help') || rest.includes('-h')) {
    io.out(command.help);
    return EXIT.ok;
  }
  return command.run(rest, io);
}

/** Words `genpipe` takes in a command's place besides the commands (suggested for typos too). */
const OTHER_WORDS = ['help', 'version'];

/** The command called `name`, or invalid input naming the nearest one (`genpipe valdiate`). */
function commandNamed(name: string): (typeof COMMANDS)[number] {
  const entry = COMMANDS.find((c) => c.name === name);
  if (entry) return entry;
  const suggestion = nearest(name, [...COMMANDS.map((c) => c.name), ...OTHER_WORDS]);
  const hint = suggestion ? `did you mean "${suggestion}"? (genpipe --help lists the commands)` : 'run genpipe --help for the list';
  throw new GenpipeError(
    'invalid_input',
    `Unknown command ${JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}...` : name)}; ${hint}.`,
  );
}

/** Commands that spend credits: a reader of stdout that leaves must not stop them half way. */
const OUTLIVE_STDOUT: ReadonlySet<string> = new Set(['run', 'resume']);
let outliveStdout = false;

/**
 * The reader of stdout left (`genpipe plan --json | head`). Most commands stop quietly, as Unix
 * tools do; a run goes on without its stdout (its journal, files and report are the record) and
 * finishes: a closed pipe is not an interrupt.
 */
function onStdoutError(error: NodeJS.ErrnoException): void {
  if (error.code === 'EPIPE' || error.code === 'ERR_STREAM_DESTROYED') {
    if (!outliveStdout) process.exit(process.exitCode ?? 0);
    return;
  }
  throw error;
}
