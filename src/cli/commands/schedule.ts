import { resolve } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import { loadManifestFile } from '../../manifest/load.js';
import { connectionFlags, didYouMean, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { numberFlag } from '../number-flag.js';
import { describeSpend } from '../../plan/guards.js';
import { formatCount, formatUsd } from '../../util/format-usd.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      cron: { type: 'string', value: 'EXPR', help: 'five fields (minute hour day month weekday), or six with seconds first' },
      tz: { type: 'string', value: 'ZONE', defaultText: 'UTC', help: 'the time zone of the cron fields, such as Europe/Berlin' },
      out: { type: 'string', value: 'DIR', help: 'where the runs go (made absolute; shared storage)' },
      name: {
        type: 'string',
        value: 'NAME',
        defaultText: "the pipeline's name",
        help: "the schedule's name; add replaces a schedule of the same name",
      },
      budget: { type: 'string', value: 'USD', unit: 'US dollars', help: "each run's budget (stops submitting before going over it)" },
      'confirm-over': {
        type: 'string',
        value: 'USD',
        unit: 'US dollars',
        defaultText: '100',
        help: 'with no budget, a manifest estimated over USD is refused unless --yes approves its estimate; each tick checks again, and a tick whose estimate has grown past the approved one spends nothing (it logs and notifies why)',
      },
      yes: { type: 'boolean', help: 'approve the estimate printed' },
      json: { type: 'boolean', help: 'with list: print the schedules as JSON' },
      ...REDIS,
    },
  },
  {
    ...CONNECTION,
    title: `${CONNECTION.title} (add uses them for the estimate only; each tick runs with the configuration of the worker that takes it, and nothing secret is stored in Redis)`,
  },
] as const;

export const scheduleCommand = defineCommand({
  name: 'schedule',
  usage: `Usage: genpipe schedule add <manifest> --cron "30 2 * * *" [--tz ZONE] --out DIR --redis URL [--name NAME]
       genpipe schedule list --redis URL [--json]
       genpipe schedule remove <name> --redis URL

Cron schedules of whole runs, kept in Redis (BullMQ job schedulers): a schedule fires once per
tick however many hosts run workers, and one worker started with --runs takes each tick's run and
coordinates it (as genpipe run --redis does). A tick while the pipeline's previous run still holds
its lock is skipped (exit 4), so two runs of a schedule never overlap. If that worker dies, another
worker with --runs resumes the run from its directory: --out must be storage every such host
shares, and the manifest path must be the same on each of them.`,
  groups: GROUPS,
  footer: 'Exit codes: 0 done, 1 no such schedule (remove), 2 invalid input, 5 Redis unreachable.',
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'schedule');
    const action = positional(positionals, 0, 'add, list or remove', 'schedule');
    if (action !== 'add' && action !== 'list' && action !== 'remove')
      throw new GenpipeError(
        'invalid_input',
        `genpipe schedule takes add, list or remove, not "${action}"${didYouMean(action, ['add', 'list', 'remove']) || '.'}`,
      );
    const { parseRedisUrl, redisUrlOf, checkRedis, DEFAULT_QUEUE } = await import('../../fleet/redis.js');
    const url = redisUrlOf(values.redis, io.env, values.config);
    if (url === undefined) throw new GenpipeError('invalid_input', `genpipe schedule ${action} needs --redis URL (or GENPIPE_REDIS_URL).`);
    const target = parseRedisUrl(url);
    const queue = values.queue ?? DEFAULT_QUEUE;
    const schedules = await import('../../fleet/schedules.js');
    if (action === 'add') {
      const manifestPath = positional(positionals, 1, 'a manifest file', 'schedule add');
      noExtraPositionals(positionals, 2, 'schedule add');
      if (values.cron === undefined)
        throw new GenpipeError('invalid_input', 'genpipe schedule add needs --cron "EXPR" (five fields, or six with seconds first).');
      if (values.out === undefined)
        throw new GenpipeError(
          'invalid_input',
          'genpipe schedule add needs --out DIR: where the runs go, on storage every worker with --runs shares.',
        );
      // Checked now, not at 02:30: a manifest that does not load is refused here (exit 2).
      const loaded = loadManifestFile(manifestPath);
      const budgetUsd = numberFlag(values.budget, '--budget', { min: 0 });
      const confirmOverUsd = numberFlag(values['confirm-over'], '--confirm-over', { min: 0 });
      // The spend guard of `genpipe run`, decided now and stored with the schedule (each tick checks again).
      const { estimateRun } = await import('../../session/spend-guard.js');
      const estimate = await estimateRun(manifestPath, {
        env: io.env,
        signal: io.signal,
        budgetUsd,
        confirmOverUsd,
        connection: { ...connectionFlags(values), offerEmulator: false },
      });
      io.out(
        `each run is estimated at ${formatUsd(estimate.estimateUsd)} (${formatCount(estimate.instances)} instance${estimate.instances === 1 ? '' : 's'})${estimate.budgetUsd === undefined ? ', with no budget' : `, with a budget of ${formatUsd(estimate.budgetUsd)}`}`,
      );
      if (estimate.big && !values.yes) {
        throw new GenpipeError(
          'invalid_input',
          `${describeSpend(estimate.big)} each time it runs, over the --confirm-over limit of ${formatUsd(estimate.big.confirmOverUsd)}, with no budget: add --budget USD to cap each run, or --yes to approve this estimate (a tick whose estimate grows past it spends nothing).`,
        );
      }
      await checkRedis(target, undefined, io.signal);
      const listed = await schedules.addSchedule(target, queue, {
        name: values.name ?? loaded.manifest.name,
        cron: values.cron,
        tz: values.tz,
        manifest: resolve(manifestPath),
        out: resolve(values.out),
        budgetUsd,
        confirmOverUsd,
        // The spend the run's guard asks about, the one a tick is checked against: the priced figure, for a step priced per instance.
        approvedUsd: estimate.big?.estimateUsd,
      });
      io.out(
        `schedule ${listed.name}: ${listed.cron}${listed.tz ? ` (${listed.tz})` : ''}, runs ${listed.manifest} into ${listed.out}; next ${listed.next ?? 'unknown'}`,
      );
      return EXIT.ok;
    }
    if (action === 'list') {
      noExtraPositionals(positionals, 1, 'schedule list');
      await checkRedis(target, undefined, io.signal);
      const all = await schedules.listSchedules(target, queue);
      if (values.json) io.out(JSON.stringify(all, null, 2));
      else if (all.length === 0) io.out('no schedules');
      else
        for (const s of all)
          io.out(`${s.name}: ${s.cron}${s.tz ? ` (${s.tz})` : ''}, ${s.manifest} into ${s.out}; next ${s.next ?? 'unknown'}`);
      return EXIT.ok;
    }
    const name = positional(positionals, 1, 'a schedule name', 'schedule remove');
    noExtraPositionals(positionals, 2, 'schedule remove');
    await checkRedis(target, undefined, io.signal);
    if (!(await schedules.removeSchedule(target, queue, name))) {
      io.err(`genpipe: There is no schedule named ${name} on queue ${queue}; genpipe schedule list shows them.`);
      return EXIT.failed;
    }
    io.out(`schedule ${name} removed`);
    return EXIT.ok;
  },
});
