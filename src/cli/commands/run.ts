import { resolve } from 'node:path';
import { GenerationClient } from '../../api/client.js';
import { resolveConfig } from '../../api/config.js';
import { GenpipeError } from '../../api/errors.js';
import type { OptionsCatalog } from '../../api/wire.js';
import { loadManifestFile } from '../../manifest/load.js';
import { buildPlan } from '../../plan/plan.js';
import type { RunEvent, RunSummary } from '../../run/events.js';
import { createRunDir, planHash, readPlanFile } from '../../run/run-dir.js';
import { runPlan } from '../../run/runner.js';
import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import type { Command } from '../command.js';
import { EMULATOR_FLAG_HELP, startEmbeddedEmulator } from '../embedded-emulator.js';
import { EXIT } from '../exit-codes.js';
import { formatUsd } from '../format.js';
import type { CliIO } from '../io.js';
import { planSources } from '../plan-sources.js';

const RUN_OPTIONS = {
  ...CONNECTION_OPTIONS,
  emulator: { type: 'boolean' },
  out: { type: 'string' },
  concurrency: { type: 'string' },
  rate: { type: 'string' },
  budget: { type: 'string' },
  'fail-fast': { type: 'boolean' },
  resume: { type: 'string' },
  'resubmit-unknown': { type: 'boolean' },
  'allow-changed': { type: 'boolean' },
  'cancel-on-abort': { type: 'boolean' },
  quiet: { type: 'boolean' },
} as const;

const RUN_HELP = `Options:
  --out DIR            where run directories go (default runs/): DIR/<pipeline>/<run-id>/
  --concurrency N      instances in flight at once (default: the manifest's, else 8)
  --rate R             submits per second (default 20); a 429 slows the whole run down
  --budget USD         stop submitting before the estimate goes over USD (exit 3)
  --fail-fast          stop submitting at the first failure
  --resubmit-unknown   on resume, resend submits whose fate is unknown (no key, no answer)
  --allow-changed      on resume, accept a manifest whose plan changed
  --cancel-on-abort    on Ctrl-C, cancel requests that are still queued
  --quiet              print only errors and the summary
${EMULATOR_FLAG_HELP}
${CONNECTION_HELP}`;

export const runCommand: Command = {
  name: 'run',
  summary: 'run a pipeline: submit, track, download, journal; resumable after any crash',
  help: `Usage: genpipe run <manifest> [options]
       genpipe run <manifest> --resume RUN_DIR [options]

Runs every instance of the manifest and writes runs/<pipeline>/<run-id>/ with plan.json,
journal.jsonl, outputs/ and outputs.csv. Exit codes: 0 all succeeded, 1 some failed,
2 invalid input, 3 the budget stopped the run, 130 interrupted (resume it).

${RUN_HELP}`,
  run: (argv, io) => runOrResume(argv, io, 'run'),
};

export const resumeCommand: Command = {
  name: 'resume',
  summary: 'continue an interrupted run from its journal, without paying twice',
  help: `Usage: genpipe resume <run_dir> [options]

Reads the run's journal and continues: finished instances are skipped, submitted ones are
followed, an intent without an answer is resent with the same Idempotency-Key where the model
honours one, and reported as unknown otherwise.

${RUN_HELP}`,
  run: (argv, io) => runOrResume(argv, io, 'resume'),
};

function number(value: string | undefined, flag: string, options: { integer?: boolean; min: number }): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < options.min || (options.integer && !Number.isInteger(n))) {
    throw new GenpipeError('invalid_input', `${flag} takes ${options.integer ? 'a whole number' : 'a number'} of at least ${options.min}, not "${value}".`);
  }
  return n;
}

async function runOrResume(argv: readonly string[], io: CliIO, command: 'run' | 'resume'): Promise<number> {
  const { values, positionals } = parse(argv, RUN_OPTIONS, command);
  const concurrency = number(values.concurrency, '--concurrency', { integer: true, min: 1 });
  const rate = number(values.rate, '--rate', { min: 0.01 });
  const budget = number(values.budget, '--budget', { min: 0 });
  let resumeDir = values.resume;
  let manifestPath: string;
  if (command === 'resume') {
    resumeDir = positional(positionals, 0, 'a run directory', 'resume');
    noExtraPositionals(positionals, 1, 'resume');
    manifestPath = (await readPlanFile(resumeDir)).manifest;
  } else {
    manifestPath = positional(positionals, 0, 'a manifest file', 'run');
    noExtraPositionals(positionals, 1, 'run');
  }
  const previous = resumeDir ? await readPlanFile(resumeDir) : undefined;
  const loaded = loadManifestFile(manifestPath);

  const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
  const flags = connectionFlags(values);
  const config = embedded
    ? resolveConfig({ flags: { ...flags, baseUrl: embedded.baseUrl }, env: {}, fallbackCredentials: embedded.credentials })
    : resolveConfig({ flags, env: io.env });
  const client = new GenerationClient(config);
  const sources = planSources(flags, io, embedded);
  let catalog: OptionsCatalog | undefined;
  const fetchCatalog = sources.options.catalog;
  try {
    const plan = await buildPlan(loaded, {
      ...sources.options,
      catalog: fetchCatalog && (async () => (catalog ??= await fetchCatalog())),
    });
    const hash = planHash(plan);
    let runDir: string;
    let runId: string;
    if (previous && resumeDir) {
      if (previous.planHash !== hash && !values['allow-changed']) {
        throw new GenpipeError('invalid_input', `The plan of ${manifestPath} changed since run ${previous.runId} started; resume with --allow-changed to accept it, or start a new run.`);
      }
      runDir = resolve(resumeDir);
      runId = previous.runId;
    } else {
      ({ runId, dir: runDir } = await createRunDir(resolve(values.out ?? (loaded.manifest.defaults?.output?.dir ? resolve(loaded.dir, loaded.manifest.defaults.output.dir) : 'runs')), plan, resolve(manifestPath), hash));
    }
    const reporter = new LineReporter(io, values.quiet === true);
    const summary = await runPlan({
      plan,
      client,
      runDir,
      runId,
      planHash: hash,
      signal: io.signal,
      catalog,
      concurrency,
      ratePerSecond: rate,
      budgetUsd: budget,
      failFast: values['fail-fast'],
      resubmitUnknown: values['resubmit-unknown'],
      cancelOnAbort: values['cancel-on-abort'],
      onEvent: (event) => reporter.on(event),
    });
    reporter.stop();
    return exitCodeOf(summary);
  } finally {
    await sources.close();
    await client.close();
    await embedded?.close();
  }
}

export function exitCodeOf(summary: RunSummary): number {
  switch (summary.outcome) {
    case 'completed':
      return EXIT.ok;
    case 'budget':
      return EXIT.budget;
    case 'aborted':
      return EXIT.interrupted;
    default:
      return EXIT.failed;
  }
}

/** Plain progress for any terminal or log: a line every few seconds, failures as they happen, a summary. */
class LineReporter {
  #done = 0;
  #failed = 0;
  #submitted = 0;
  #total = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly io: CliIO,
    private readonly quiet: boolean,
  ) {}

  on(event: RunEvent): void {
    switch (event.type) {
      case 'run_started':
        this.#total = event.instances;
        if (!this.quiet) this.io.err(`${event.resumed ? 'resuming' : 'running'} ${event.pipeline}: ${event.instances} instance(s) in ${event.runDir}`);
        this.#timer = setInterval(() => this.#progress(), 5_000);
        this.#timer.unref();
        return;
      case 'instance_submitted':
        this.#submitted++;
        return;
      case 'instance_finished':
        if (event.status === 'completed') this.#done++;
        else {
          this.#failed++;
          if (!this.quiet) this.io.err(`${event.instance}: ${event.status}${event.error ? `: ${event.error}` : ''}`);
        }
        return;
      case 'instance_failed':
        this.#failed++;
        this.io.err(`${event.instance}: ${event.message}`);
        return;
      case 'instance_unknown':
        this.io.err(`${event.instance}: unknown: ${event.message}`);
        return;
      case 'run_stopping':
        this.io.err(event.message);
        return;
      case 'run_finished': {
        const s = event.summary;
        const c = s.counts;
        const parts = [`${c.completed} completed`, `${c.failed} failed`, `${c.nsfw} nsfw`, `${c.canceled} canceled`];
        if (c.unknown) parts.push(`${c.unknown} unknown`);
        if (c.pending) parts.push(`${c.pending} not started`);
        this.io.out(`${s.pipeline} ${s.runId}: ${s.outcome}; ${parts.join(', ')}; estimated ${formatUsd(s.estimatedUsd)}; ${(s.durationMs / 1000).toFixed(1)} s; ${s.runDir}`);
        return;
      }
      default:
        return;
    }
  }

  #progress(): void {
    if (!this.quiet) this.io.err(`progress: ${this.#done + this.#failed}/${this.#total} done (${this.#failed} failed), ${this.#submitted - this.#done - this.#failed} in flight`);
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
  }
}
