import { GenpipeError } from '../../api/errors.js';
import { readPlanFile } from '../../run/files/run-dir.js';
import { isLoopbackHost } from '../../util/loopback-host.js';
import { noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { EXIT } from '../../session/exit-codes.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      port: { type: 'string', value: 'N', defaultText: '0 (a free one)', help: 'port to listen on' },
      host: { type: 'string', value: 'ADDR', defaultText: '127.0.0.1', help: 'a loopback address to bind' },
    },
  },
] as const;

export const reviewCommand = defineCommand({
  name: 'review',
  usage: `Usage: genpipe review <run_dir> [--port N] [--host ADDR]

Serves the run's gallery on loopback with approve / reject / clear / star controls on every cell
(keys: a approves, r rejects, u clears, s stars, S unstars; none toggles; j and k move between
cells, c compares), counts of approved, rejected, starred and unreviewed cells in the header,
filters by status, decision and text, and a
side-by-side compare of 2 to 4 cells. Each decision is saved at once to RUN_DIR/review.json. The
first line printed is "listening on http://HOST:PORT"; Ctrl-C stops it.

Then: \`for_each: {step: sheets, only: approved}\` runs a next stage for the approved instances,
and \`genpipe resume RUN_DIR --retry rejected\` makes the rejected ones again with a new seed.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'review');
    const runDir = positional(positionals, 0, 'a run directory', 'review');
    noExtraPositionals(positionals, 1, 'review');
    const host = values.host ?? '127.0.0.1';
    if (!isLoopbackHost(host))
      throw new GenpipeError(
        'invalid_input',
        `--host takes a loopback address (127.0.0.1, ::1, localhost), not "${host}": the review page writes to the run directory and has no login.`,
      );
    const port = values.port === undefined ? 0 : Number(values.port);
    if (!Number.isInteger(port) || port < 0 || port > 65_535)
      throw new GenpipeError('invalid_input', `--port takes a whole number from 0 to 65535, not "${values.port}".`);
    await readPlanFile(runDir);
    const { startReviewServer } = await import('../../review/review-server.js');
    const server = await startReviewServer(runDir, { host, port });
    io.out(`listening on ${server.url}`);
    io.out(`decisions are saved to ${runDir.replace(/\/+$/, '')}/review.json; Ctrl-C stops.`);
    await new Promise<void>((resolve) => {
      if (io.signal.aborted) resolve();
      else io.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    await server.close();
    return EXIT.ok;
  },
});
