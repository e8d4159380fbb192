import { GenpipeError } from '../../api/errors.js';
import { didYouMean, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { numberFlag, wholeNumber } from '../number-flag.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      ...REDIS,
      concurrency: { type: 'string', value: 'N', help: 'with limits: instances in flight at once, across every worker' },
      rate: {
        type: 'string',
        value: 'R[/s]',
        unit: 'starts per second',
        help: 'with limits: instances started per second, across every worker',
      },
      json: { type: 'boolean', help: 'with status: print it as JSON' },
    },
  },
  CONNECTION,
] as const;

export const queueCommand = defineCommand({
  name: 'queue',
  usage: `Usage: genpipe queue limits --redis URL [--queue NAME] [--concurrency N] [--rate R/s]
       genpipe queue status --redis URL [--queue NAME] [--json]

limits: the account-wide caps of a fleet queue, shared by every worker and every run on it:
instances in flight at once (--concurrency) and started per second (--rate). Prints the limits
in force. A 429 anywhere pauses the whole queue for its Retry-After.
status: waiting, active, delayed, completed and failed jobs per run; the jobs active in the
queue beside the live workers' own count; the workers with host, pid and last heartbeat, a
worker silent for longer than its lock lease (10 s) shown as lost; the limits in force.`,
  groups: GROUPS,
  footer: 'Exit codes: 0 done, 2 invalid input, 5 Redis unreachable.',
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'queue');
    const action = positional(positionals, 0, 'limits or status', 'queue');
    noExtraPositionals(positionals, 1, 'queue');
    if (action !== 'limits' && action !== 'status')
      throw new GenpipeError(
        'invalid_input',
        `genpipe queue takes limits or status, not "${action}"${didYouMean(action, ['limits', 'status']) || '.'}`,
      );
    const concurrency = wholeNumber(values.concurrency, '--concurrency', 1);
    const rate = numberFlag(values.rate?.replace(/\/s$/, ''), '--rate', { min: 0.01 });
    if (action === 'status' && (concurrency !== undefined || rate !== undefined))
      throw new GenpipeError('invalid_input', '--concurrency and --rate set limits: use them with genpipe queue limits.');
    const { parseRedisUrl, redisUrlOf, checkRedis, DEFAULT_QUEUE } = await import('../../fleet/redis.js');
    const url = redisUrlOf(values.redis, io.env, values.config);
    if (url === undefined) throw new GenpipeError('invalid_input', `genpipe queue ${action} needs --redis URL (or GENPIPE_REDIS_URL).`);
    const target = parseRedisUrl(url);
    const queue = values.queue ?? DEFAULT_QUEUE;
    await checkRedis(target, undefined, io.signal);
    const admin = await import('../../fleet/queue-admin.js');
    if (action === 'limits') {
      const limits = await admin.setQueueLimits(target, queue, { concurrency, ratePerSecond: rate });
      io.out(
        `queue ${queue}: concurrency ${limits.concurrency ?? 'unlimited'}, rate ${limits.ratePerSecond === null ? 'unlimited' : `${limits.ratePerSecond}/s`}`,
      );
      return EXIT.ok;
    }
    const status = await admin.queueStatus(target, queue);
    if (values.json) {
      io.out(JSON.stringify(status, null, 2));
      return EXIT.ok;
    }
    const t = status.totals;
    io.out(
      `queue ${queue} at ${target.shown}: concurrency ${status.limits.concurrency ?? 'unlimited'}, rate ${status.limits.ratePerSecond === null ? 'unlimited' : `${status.limits.ratePerSecond}/s`}`,
    );
    io.out(`jobs: ${t.waiting} waiting, ${t.active} active, ${t.delayed} delayed, ${t.completed} completed, ${t.failed} failed`);
    for (const run of status.runs) {
      const c = run.counts;
      io.out(
        `  run ${run.runId}: ${c.waiting} waiting, ${c.active} active, ${c.delayed} delayed, ${c.completed} completed, ${c.failed} failed`,
      );
    }
    if (status.runsTruncated) io.out('  (runs counted from the first 10,000 jobs of each state)');
    const live = status.liveWorkers;
    io.out(`active: ${t.active} in the queue, ${live.active} by the live workers' own count (of ${live.concurrency} they run at once)`);
    const lost = status.workers.length - live.count;
    io.out(status.workers.length === 0 ? 'workers: none' : `workers: ${live.count} live${lost > 0 ? `, ${lost} lost` : ''}`);
    for (const w of status.workers)
      io.out(
        `  ${w.name}: ${w.lost ? `lost (last seen ${w.lastSeenS} s ago), ` : ''}host ${w.host}, pid ${w.pid}, ${w.active} active of ${w.concurrency}, ${w.done} done, last heartbeat ${w.at}`,
      );
    return EXIT.ok;
  },
});
