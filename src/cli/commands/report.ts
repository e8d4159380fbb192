import { setWritingFolder } from '../../session/disk-refusal.js';
import { configFilePath, readConfigFile } from '../../api/config.js';
import { GenpipeError } from '../../api/errors.js';
import { resolve } from 'node:path';
import { writeCostReport } from '../../report/write-report.js';
import { copyText } from '../../util/copy-text.js';
import { MAX_GALLERY_INSTANCES, rewriteGallery } from '../../gallery/write-gallery.js';
import { reviewWaitSentence } from '../../review/review-wait.js';
import { noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { writeBytes } from '../io.js';
import { runFile } from '../../run/files/run-layout.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      json: { type: 'boolean', help: 'print report.json' },
      csv: { type: 'boolean', help: 'print report.csv' },
      md: { type: 'boolean', help: 'print report.md (the default)' },
      config: { ...CONNECTION.options.config, help: `${CONNECTION.options.config.help}; only its credits_per_usd is read` },
    },
  },
] as const;

export const reportCommand = defineCommand({
  name: 'report',
  usage: `Usage: genpipe report <run_dir> [--json | --csv | --md] [--config FILE]

Counts by final status, estimated cost, actual cost where the service reports it (agent turns),
refunds (failed and nsfw requests, failed agent turns) and totals, per instance, per step and per
model, in US$ and credits (credits_per_usd from the config file, default 100). Writes report.json,
report.csv and report.md into the run directory and prints one of them (Markdown by default).
Also rewrites gallery.html (and its data files under gallery-data/), the run's contact sheet, from
the journal, and says when a \`for_each: {step, only: approved}\` step waits on review
(then: genpipe review, genpipe resume).`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'report');
    const runDir = positional(positionals, 0, 'a run directory', 'report');
    setWritingFolder(resolve(runDir));
    noExtraPositionals(positionals, 1, 'report');
    if ([values.json, values.csv, values.md].filter(Boolean).length > 1)
      throw new GenpipeError('invalid_input', 'Choose one of --json, --csv and --md.');
    const configPath = configFilePath({ config: values.config }, io.env);
    const creditsPerUsd = configPath ? readConfigFile(configPath).credits_per_usd : undefined;
    const report = await writeCostReport(runDir, creditsPerUsd === undefined ? {} : { creditsPerUsd });
    // The report has just counted the journal's instances: a journal over the gallery's limit is not read again.
    if ((await rewriteGallery(runDir, { instancesAtLeast: report.instanceLines })) === undefined)
      io.err(
        `genpipe: gallery.html was left as the run wrote it: its journal names more than ${MAX_GALLERY_INSTANCES.toLocaleString('en-US')} instances, too many for a contact sheet.`,
      );
    // A step that follows only approved instances and waits on review: said, with what to run next.
    const waiting = await reviewWaitSentence(runDir);
    if (waiting) io.err(waiting);
    // What was just written, streamed: a report of any size is never held as one string.
    await copyText(runFile(runDir, values.json ? 'reportJson' : values.csv ? 'reportCsv' : 'reportMd'), (chunk) => writeBytes(io, chunk));
    return EXIT.ok;
  },
});
