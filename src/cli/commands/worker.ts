import { GenpipeError } from '../../api/errors.js';
import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { openClient } from '../open-client.js';
import { wholeNumber } from '../number-flag.js';

/** After SIGTERM, how long jobs in flight may take before they are handed back to the queue. */
const DEFAULT_GRACE_S = 20;

export const workerCommand: Command = {
  name: 'worker',
  help: `Usage: genpipe worker --redis URL [--queue NAME] [--concurrency N] [--name ID] [--grace S]

A fleet worker: takes instance jobs from the queue (any run's), submits each with its
Idempotency-Key, follows it to its end and hands the final status and output URLs back to the
run's coordinator. It needs the service's credentials (HF_KEY, or the config file), no shared
disk. The first line printed starts with "ready". The queue's limits (genpipe queue limits)
hold across every worker. SIGTERM or Ctrl-C: it stops taking jobs, lets those in flight finish
for up to --grace seconds, hands back the rest (another worker follows them) and exits 0.

  --redis URL        redis://[user:password@]host[:port][/db] (or GENPIPE_REDIS_URL)
  --queue NAME       the queue (default genpipe)
  --concurrency N    jobs this worker runs at once (default 8)
  --name ID          how queue status names it (default host-pid)
  --grace S          seconds jobs in flight may take after SIGTERM (default ${DEFAULT_GRACE_S})
Exit codes: 0 stopped by a signal, 2 invalid input, 5 Redis unreachable at start.

${CONNECTION_HELP}`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, { ...CONNECTION_OPTIONS, redis: { type: 'string' }, queue: { type: 'string' }, concurrency: { type: 'string' }, name: { type: 'string' }, grace: { type: 'string' } }, 'worker');
    noExtraPositionals(positionals, 0, 'worker');
    const { parseRedisUrl, redisUrlOf, checkRedis, DEFAULT_QUEUE } = await import('../../fleet/redis.js');
    const url = redisUrlOf(values.redis, io.env);
    if (url === undefined) throw new GenpipeError('invalid_input', 'genpipe worker needs --redis URL (or GENPIPE_REDIS_URL): the queue it takes jobs from.');
    const target = parseRedisUrl(url);
    const concurrency = wholeNumber(values.concurrency, '--concurrency', 1) ?? 8;
    const graceS = wholeNumber(values.grace, '--grace', 0) ?? DEFAULT_GRACE_S;
    const client = openClient(connectionFlags(values), io);
    try {
      await checkRedis(target);
      const { startFleetWorker, defaultWorkerName } = await import('../../fleet/worker.js');
      const name = values.name ?? defaultWorkerName();
      const queue = values.queue ?? DEFAULT_QUEUE;
      const worker = await startFleetWorker({ redis: target, queue, client, concurrency, name, say: (line) => io.err(line) });
      io.out(`ready: worker ${name} on queue ${queue} at ${target.shown}, ${concurrency} at once`);
      await new Promise<void>((resolve) => {
        if (io.signal.aborted) resolve();
        else io.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      io.err(`worker ${name}: stopping; jobs in flight have ${graceS} s to finish, then go back to the queue.`);
      await worker.close(graceS * 1000);
      io.err(`worker ${name}: stopped.`);
      return EXIT.ok;
    } finally {
      await client.close();
    }
  },
};
