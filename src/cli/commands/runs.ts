import { listRuns, type RunListing } from '../../report/run-list.js';
import { noExtraPositionals, parse } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../../session/exit-codes.js';
import { formatCount, formatSpend } from '../../util/format-usd.js';

/** `240/240: 80 made, 160 reused`: a reused instance is done, as the summary and the report count it. */
function doneText(r: RunListing): string {
  const done = `${formatCount(r.completed)}/${formatCount(r.instances)}`;
  return r.reused > 0 ? `${done}: ${formatCount(r.made)} made, ${formatCount(r.reused)} reused` : `${done} completed`;
}

export const runsCommand: Command = {
  name: 'runs',
  help: `Usage: genpipe runs [--pipeline NAME] [--out DIR] [--json]

Lists DIR/<pipeline>/<run-id>/ (DIR is runs/ by default). Status is the run's outcome
(completed, failed, budget, stopped, or interrupted: stopped by a signal or never finished; resume it).`,
  async run(argv, io) {
    const { values, positionals } = parse(
      argv,
      { pipeline: { type: 'string' }, out: { type: 'string' }, json: { type: 'boolean' } },
      'runs',
    );
    noExtraPositionals(positionals, 0, 'runs');
    const runs = await listRuns(values.out ?? 'runs', values.pipeline);
    if (values.json) {
      io.out(JSON.stringify(runs, null, 2));
      return EXIT.ok;
    }
    if (runs.length === 0) {
      io.out(`no runs under ${values.out ?? 'runs'}${values.pipeline ? ` for ${values.pipeline}` : ''}`);
      return EXIT.ok;
    }
    for (const r of runs) io.out(`${r.runId}  ${r.pipeline}  ${r.status}  ${doneText(r)}  ${formatSpend(r)}  ${r.dir}`);
    return EXIT.ok;
  },
};
