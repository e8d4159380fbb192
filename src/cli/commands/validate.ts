import { priceLine } from '../../plan/price.js';
import { GenpipeError } from '../../api/errors.js';
import { ManifestError, type ManifestProblem } from '../../manifest/errors.js';
import { checkManifestFile } from '../../manifest/load.js';
import { buildPlan } from '../../plan/plan.js';
import { skippedRowsLines } from '../../plan/skipped-rows.js';
import { resolveNotifyTargets } from '../../notify/notify-targets.js';
import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import type { CliIO } from '../io.js';
import { EXIT, exitCodeFor } from '../../session/exit-codes.js';
import { startEmbeddedEmulator } from '../../session/embedded-emulator.js';
import { planSources } from '../../session/plan-sources.js';
import { formatCount, formatSpend } from '../../util/format-usd.js';
import { budgetOf, overBudgetWarning, unpricedUnderBudget } from '../../plan/guards.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      json: {
        type: 'boolean',
        help: 'print the problems on stdout as one JSON array of {file, line, col, code, message} ([] when the manifest is valid; line and col are 0 for a problem about a whole file, such as a missing one; a problem with a sweep value adds also: {file, line, col, path}, the template that reads it). Exit codes as without --json. Codes: yaml, schema, reference, missing_file, unreadable_file, csv, axis, env, instance, empty_cell, file_name, price, budget, notify, too_large, invalid.',
      },
      ...EMULATOR,
    },
  },
  CONNECTION,
] as const;

export const validateCommand = defineCommand({
  name: 'validate',
  usage: `Usage: genpipe validate <manifest> [--json] [--emulator]

Exits 0 when the manifest and every instance are valid, or 2 listing every problem with its
file:line:col, all in one pass: a broken step does not hide the problems of the others.
Selections are checked against the live options catalog and preset axes are resolved from the
preset catalog, which needs the service address (nothing is spent).
It refuses what genpipe run refuses: with budget_usd, every step needs a price. An estimate over
budget_usd is a warning (the run stops submitting there), not a refusal.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'validate');
    const file = positional(positionals, 0, 'a manifest file', 'validate');
    noExtraPositionals(positionals, 1, 'validate');
    const check = checkManifestFile(file);
    const problems: ManifestProblem[] = [...check.problems];
    const loaded = check.loaded;
    let summary: string | undefined;
    let warning: string | undefined;
    let skipped: string[] = [];
    let prices: string[] = [];
    if (loaded) {
      try {
        collect(problems, 'notify', () => resolveNotifyTargets(loaded, [], io.env, { allowUnsetEnv: true }));
        const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
        const sources = planSources(connectionFlags(values), io, embedded);
        try {
          // keepGoing: a step that cannot be resolved does not stop the others being checked.
          const plan = await collectAsync(problems, 'invalid', () => buildPlan(loaded, { ...sources.options, keepGoing: true }));
          if (plan) {
            const budget = budgetOf(plan);
            const refusal = unpricedUnderBudget(plan, budget);
            if (refusal) problems.push(...refusal.problems.map((p) => ({ ...p, code: p.code ?? 'budget' })));
            const estimate = plan.estimate();
            summary =
              `${file}: valid; ${plan.steps.length} step(s), ${formatCount(plan.totalInstances)} instance(s), ` +
              `estimated ${formatSpend({ netUsd: estimate.knownUsd, unpricedInstances: estimate.unknownInstances })}`;
            // Where each step's price comes from, and which are token-priced (provisional).
            prices = plan.steps.map((step) => `price of ${priceLine(step.id, step.price)}`);
            warning = overBudgetWarning(plan, budget);
            // Rows set aside by on_invalid: skip are not problems of the manifest; they are said.
            skipped = skippedRowsLines(plan.skippedRows, Number.POSITIVE_INFINITY);
          }
        } finally {
          await sources.close();
          await embedded?.close();
        }
      } catch (error) {
        // With --json, a refusal that is not located in the manifest (a bad config file, too many
        // notify targets) is still one entry of the array; a service that cannot be reached is not
        // a problem of the manifest, and stays a sentence (exit 5).
        if (!values.json || !(error instanceof GenpipeError) || exitCodeFor(error.code) !== EXIT.invalidInput) throw error;
        problems.push({ location: { file, line: 0, col: 0 }, path: '', message: error.message, code: 'invalid' });
      }
    }
    if (values.json) {
      await printJson(problems, io);
      if (problems.length === 0 && warning) io.err(warning);
      if (problems.length === 0) for (const line of skipped) io.err(line);
      return problems.length > 0 ? EXIT.invalidInput : EXIT.ok;
    }
    if (problems.length > 0) throw new ManifestError(problems);
    io.out(summary ?? `${file}: valid`);
    for (const line of prices) io.out(line);
    if (warning) io.out(warning);
    for (const line of skipped) io.out(line);
    return EXIT.ok;
  },
});

/** Runs `check`, adding the problems of a ManifestError it throws (with `code` when they have none). */
function collect(problems: ManifestProblem[], code: ManifestProblem['code'], check: () => unknown): void {
  try {
    check();
  } catch (error) {
    if (!(error instanceof ManifestError)) throw error;
    problems.push(...error.problems.map((p) => ({ ...p, code: p.code ?? code })));
  }
}

async function collectAsync<T>(
  problems: ManifestProblem[],
  code: ManifestProblem['code'],
  check: () => Promise<T>,
): Promise<T | undefined> {
  try {
    return await check();
  } catch (error) {
    if (!(error instanceof ManifestError)) throw error;
    problems.push(...error.problems.map((p) => ({ ...p, code: p.code ?? code })));
    return undefined;
  }
}

/** The problems in document order, each as {file, line, col, code, message}; the message starts with its path. */
async function printJson(problems: readonly ManifestProblem[], io: CliIO): Promise<void> {
  // ManifestError sorts and bounds the list (a hostile manifest cannot make the answer huge).
  const listed = problems.length === 0 ? [] : new ManifestError(problems).problems;
  const rows = listed.map((p) => ({
    file: p.location.file,
    line: p.location.line,
    col: p.location.col,
    code: p.code ?? 'invalid',
    message: `${p.path ? `${p.path}: ` : ''}${p.message}`,
    ...(p.also ? { also: { file: p.also.location.file, line: p.also.location.line, col: p.also.location.col, path: p.also.path } } : {}),
  }));
  await io.write(`${JSON.stringify(rows, null, 2)}\n`);
}
