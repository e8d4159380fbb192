import { open, rename, writeFile } from 'node:fs/promises';
import { GenpipeError } from '../../api/errors.js';
import { basename, join, resolve } from 'node:path';
import { diffData, type DiffRun } from '../../diff/diff-data.js';
import { DIFF_PAGE_GENERATOR, diffHtml } from '../../diff/diff-page.js';
import { runInputs } from '../../diff/run-inputs.js';
import { readPlanFile } from '../../run/files/run-dir.js';
import { formatCount, formatUsd } from '../../util/format-usd.js';
import { replayFile } from '../../run/journal/run-state.js';
import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import { startEmbeddedEmulator } from '../../session/embedded-emulator.js';
import { EXIT } from '../../session/exit-codes.js';
import type { CliIO } from '../io.js';
import { planSources, type PlanSources } from '../../session/plan-sources.js';
import { redactEveryForm } from '../../util/redact.js';
import { runFile } from '../../run/files/run-layout.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      out: { type: 'string', value: 'FILE', defaultText: "RUN_B/diff-<run A's id>.html", help: 'where to write the page' },
      ...EMULATOR,
    },
  },
  CONNECTION,
] as const;

export const diffCommand = defineCommand({
  name: 'diff',
  usage: `Usage: genpipe diff <run_a> <run_b> [--out FILE]

Writes a side-by-side page of the instances two runs share (matched by instance id): the input
fields that differ (A → B), and each run's image or player, status, cost, error and request id,
with a switch to show only the instances that differ. Inputs come from the copy of its manifest
each run keeps, planned again with the run's own id and date and the CSV rows and presets it read
(inputs.json, never today's files); nothing that spends is sent (a manifest with selections reads
the catalog). A reused result counts as completed. Prints the page's path and a summary.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'diff');
    const dirA = resolve(positional(positionals, 0, 'two run directories', 'diff'));
    const dirB = resolve(positional(positionals, 1, 'two run directories', 'diff'));
    noExtraPositionals(positionals, 2, 'diff');
    const [planA, planB] = [await readPlanFile(dirA), await readPlanFile(dirB)];
    const page = resolve(values.out ?? join(dirB, `diff-${basename(planA.runId)}.html`));
    await assertMayWritePage(page);
    const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
    const sources = planSources(connectionFlags(values), io, embedded);
    try {
      const a: DiffRun = {
        plan: planA,
        runDir: dirA,
        state: await replayFile(runFile(dirA, 'journal')),
        inputs: await runInputs(dirA, planA, inputOptions(sources, io)),
      };
      const b: DiffRun = {
        plan: planB,
        runDir: dirB,
        state: await replayFile(runFile(dirB, 'journal')),
        inputs: await runInputs(dirB, planB, inputOptions(sources, io)),
      };
      const data = diffData(a, b);
      const temp = `${page}.${process.pid}.tmp`;
      await writeFile(temp, redactEveryForm(diffHtml(data, page)));
      await rename(temp, page);
      io.out(`wrote ${page}`);
      io.out(
        `${formatCount(data.shared)} shared instances (${formatCount(data.onlyA)} only in A, ${formatCount(data.onlyB)} only in B); inputs differ in ${formatCount(data.inputsDiffer)}, status in ${formatCount(data.statusDiffers)}; cost of the shared instances: A ${formatUsd(data.a.costUsd)}, B ${formatUsd(data.b.costUsd)}.`,
      );
      for (const note of data.notes) io.err(`note: ${note}.`);
      return EXIT.ok;
    } finally {
      await sources.close();
      await embedded?.close();
    }
  },
});

/**
 * `--out` names an HTML page: a new file, or a diff page genpipe wrote before. Anything else there
 * (a run's journal, any other file) is never replaced: refused, exit 2, before any work.
 */
async function assertMayWritePage(page: string): Promise<void> {
  if (!/\.html?$/i.test(page)) throw new GenpipeError('invalid_input', `--out ${page} is not an .html file; the diff is a page.`);
  let head: string;
  try {
    const handle = await open(page, 'r');
    try {
      const { bytesRead, buffer } = await handle.read(Buffer.alloc(1024), 0, 1024, 0);
      head = buffer.subarray(0, bytesRead).toString('utf8');
    } finally {
      await handle.close();
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new GenpipeError(
      'invalid_input',
      `--out ${page} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'unknown error'}), so it is not replaced.`,
    );
  }
  if (!head.includes(`<meta name="generator" content="${DIFF_PAGE_GENERATOR}">`)) {
    throw new GenpipeError(
      'invalid_input',
      `--out ${page} exists and is not a diff page genpipe wrote: it is left as it is; choose another file.`,
    );
  }
}

const inputOptions = (sources: PlanSources, io: CliIO) => ({
  catalog: sources.options.catalog,
  presets: sources.options.presets,
  env: io.env,
});
