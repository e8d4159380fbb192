import { GenpipeError } from '../../api/errors.js';
import { connectionFlags, noExtraPositionals, parse } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { openClient } from '../open-client.js';
import { wholeNumber } from '../number-flag.js';
import { webhookFlags, WebhookReceiver } from '../../run/polling/webhook-receiver.js';
import type { CliIO } from '../io.js';
import { workerLog } from '../worker-log.js';
import type { RedisTarget } from '../../fleet/redis.js';
import type { RunTaker } from '../../fleet/run-taker.js';
import type { SessionOptions } from '../../session/run-session.js';
import type { ConfigFlags } from '../../api/config.js';
import type { RunObserver } from '../../run/observer.js';
import { parseMetricsAddress, type MetricsServer } from '../../metrics/serve.js';

/**
 * After SIGTERM, how long jobs in flight may take before they are handed back to the queue. A
 * genpipe process ends within 5 s of a signal whatever it is doing (main.ts
 * STOP_GRACE_MS ends it at 4 s), so a worker's grace is at most MAX_GRACE_S: a longer one would be
 * cut short with its jobs still held, and they would wait for Redis' stalled-job check instead.
 */
const MAX_GRACE_S = 3;
const DEFAULT_GRACE_S = MAX_GRACE_S;

const GROUPS = [
  {
    title: 'Options',
    options: {
      ...REDIS,
      concurrency: { type: 'string', value: 'N', defaultText: '8', help: 'jobs this worker runs at once' },
      name: { type: 'string', value: 'ID', defaultText: 'host-pid', help: 'how queue status names it' },
      grace: {
        type: 'string',
        value: 'S',
        unit: 'seconds',
        defaultText: String(DEFAULT_GRACE_S),
        help: `seconds jobs in flight may take after SIGTERM, 0 to ${MAX_GRACE_S}`,
      },
      runs: {
        type: 'boolean',
        help: "also take scheduled runs (genpipe schedule), one at a time, and coordinate each as genpipe run --redis would, with this worker's connection options; a run whose worker died is resumed from its directory by another worker with --runs",
      },
      'webhook-url': {
        type: 'string',
        value: 'URL',
        help: "with --listen, follow this worker's requests by webhook: the service reaches the receiver at URL (a random token is appended); polling stays on as a slow fallback, and jobs taken over from another worker are polled",
      },
      listen: { type: 'string', value: 'HOST:PORT', help: 'with --webhook-url, where the webhook receiver listens' },
      'json-logs': {
        type: 'boolean',
        help: 'one JSON event per line on stdout (worker_ready, job_finished, worker_message), for log shippers',
      },
      metrics: {
        type: 'string',
        value: 'HOST:PORT',
        help: "serve /metrics in the Prometheus text format at HOST:PORT (a bare PORT listens on 127.0.0.1; another host must be named, such as 0.0.0.0:9464): this worker's requests, 429s and throttling, the queue's jobs and the workers' heartbeats",
      },
    },
  },
  CONNECTION,
] as const;

export const workerCommand = defineCommand({
  name: 'worker',
  usage: `Usage: genpipe worker --redis URL [--queue NAME] [--concurrency N] [--name ID] [--grace S] [--runs]
                      [--webhook-url URL --listen HOST:PORT] [--json-logs] [--metrics HOST:PORT]

A fleet worker: takes instance jobs from the queue (any run's), submits each with its
Idempotency-Key, follows it to its end and hands the final status and output URLs back to the
run's coordinator. It needs the service's credentials (HF_KEY, or the config file), no shared
disk. The first line printed starts with "ready" (with --json-logs, a worker_ready event); then
one line per job it ends: instance, run, outcome, duration, start and end. The queue's limits (genpipe queue limits)
hold across every worker. SIGTERM or Ctrl-C: it stops taking jobs, lets those in flight finish
for up to --grace seconds, hands back the rest (another worker follows them) and exits 0, all
within 5 s of the signal (past 4 s it is ended with 143, or 130 for Ctrl-C).`,
  groups: GROUPS,
  footer: `Exit codes: 0 stopped by a signal, 2 invalid input, 5 Redis unreachable at start, or not
answering for 10 s once started, 130 a signal while it still waited on Redis at start.`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'worker');
    noExtraPositionals(positionals, 0, 'worker');
    const { parseRedisUrl, redisUrlOf, checkRedis, DEFAULT_QUEUE } = await import('../../fleet/redis.js');
    const url = redisUrlOf(values.redis, io.env, values.config);
    if (url === undefined)
      throw new GenpipeError('invalid_input', 'genpipe worker needs --redis URL (or GENPIPE_REDIS_URL): the queue it takes jobs from.');
    const target = parseRedisUrl(url);
    const concurrency = wholeNumber(values.concurrency, '--concurrency', 1) ?? 8;
    const graceS = wholeNumber(values.grace, '--grace', 0) ?? DEFAULT_GRACE_S;
    if (graceS > MAX_GRACE_S)
      throw new GenpipeError(
        'invalid_input',
        `--grace ${graceS} is over ${MAX_GRACE_S} s: a genpipe process ends within 5 s of SIGTERM, so jobs still in flight after ${MAX_GRACE_S} s are handed back to the queue (another worker follows them from their submission).`,
      );
    const listen = webhookFlags(values['webhook-url'], values.listen);
    const metricsAt = values.metrics === undefined ? undefined : parseMetricsAddress(values.metrics);
    // A worker has no --emulator: its messages must not suggest one.
    const connection = { ...connectionFlags(values), offerEmulator: false };
    const client = openClient(connection, io);
    let webhook: WebhookReceiver | undefined;
    let metricsServer: MetricsServer | undefined;
    try {
      // Ctrl-C or SIGTERM while it waits on Redis: interrupted (exit 130), nothing started.
      await checkRedis(target, undefined, io.signal);
      if (listen) webhook = await WebhookReceiver.start(listen);
      const { startFleetWorker, defaultWorkerName } = await import('../../fleet/worker.js');
      const name = values.name ?? defaultWorkerName();
      const queue = values.queue ?? DEFAULT_QUEUE;
      const log = workerLog(io, name, values['json-logs'] === true);
      const metrics = metricsAt
        ? (await import('../../metrics/metrics.js')).createMetrics({ runDirs: [], redis: { target, queue } })
        : undefined;
      const worker = await startFleetWorker({
        redis: target,
        queue,
        client,
        concurrency,
        name,
        say: (line) => log.say(line),
        webhook,
        onJob: (job) => log.job(job),
        observer: metrics?.observer,
      });
      const runs = values.runs ? await startRuns(connection, target, queue, name, io, metrics?.observer) : undefined;
      if (metrics && metricsAt) {
        const { serveMetrics, reachableFromOutside } = await import('../../metrics/serve.js');
        metricsServer = await serveMetrics(metrics, metricsAt);
        if (reachableFromOutside(metricsAt.host))
          log.say(
            `worker ${name}: metrics at ${metricsServer.url} can be read by anyone who reaches this host on port ${metricsServer.port}.`,
          );
      }
      log.ready(
        `ready: worker ${name} on queue ${queue} at ${target.shown}, ${concurrency} at once${webhook ? `, webhooks on ${listen?.host}:${webhook.port}` : ''}${runs ? ', taking scheduled runs' : ''}${metricsServer ? `, metrics at ${metricsServer.url}` : ''}`,
        {
          queue,
          redis: target.shown,
          concurrency,
          ...(webhook ? { webhookPort: webhook.port } : {}),
          runs: runs !== undefined,
          ...(metricsServer ? { metricsUrl: metricsServer.url } : {}),
        },
      );
      // A Redis that stops answering mid-way ends the worker (exit 5) instead of a silent hang.
      const { watchRedis, redisStallMs } = await import('../../fleet/redis-watch.js');
      const watch = watchRedis(target, `worker ${name}`, redisStallMs(io.env));
      const stalled = await new Promise<GenpipeError | undefined>((resolve) => {
        if (io.signal.aborted) resolve(undefined);
        else io.signal.addEventListener('abort', () => resolve(undefined), { once: true });
        void watch.stalled.then(resolve);
      });
      watch.close();
      if (stalled) {
        // Nothing can be handed back through a Redis that does not answer: its stalled-job check
        // gives this worker's jobs to another worker once it answers again.
        await Promise.race([runs?.close().catch(() => {}), new Promise((r) => setTimeout(r, 2_000).unref())]);
        await worker.disconnect();
        throw stalled;
      }
      log.say(`worker ${name}: stopping; jobs in flight have ${graceS} s to finish, then go back to the queue.`);
      await runs?.close();
      await worker.close(graceS * 1000);
      log.say(`worker ${name}: stopped.`);
      return EXIT.ok;
    } finally {
      await metricsServer?.close();
      await webhook?.close();
      await client.close();
    }
  },
});

/**
 * `--runs`: scheduled runs, coordinated in this process as `genpipe run --redis` (or, taking over
 * a run whose worker died, `genpipe resume`) would, with their lines on stderr tagged by schedule.
 */
async function startRuns(
  connection: ConfigFlags,
  target: RedisTarget,
  queue: string,
  name: string,
  io: CliIO,
  observer: RunObserver | undefined,
): Promise<RunTaker> {
  const { startRunTaker } = await import('../../fleet/run-taker.js');
  return startRunTaker({
    redis: target,
    queue,
    name,
    say: (line) => io.err(line),
    coordinate: async (data, takeover, stop, remember) => {
      const { resumeRun, startRun } = await import('../../session/run-session.js');
      const { tickSpendCheck } = await import('../../session/spend-guard.js');
      const { reportError } = await import('../report-error.js');
      const tag = (text: string): string =>
        text
          .split('\n')
          .map((line) => `[${data.schedule}] ${line}`)
          .join('\n');
      const say = (t: string): void => io.err(tag(t));
      // The run's life as `genpipe run --redis` has it, through the same session (src/session/).
      const options: SessionOptions = {
        fleet: { redis: target, queue },
        // The worker's own service flags, as its instance jobs use them.
        connection,
        quiet: true,
        out: say,
        err: say,
        env: io.env,
        signal: AbortSignal.any([io.signal, stop]),
        onRunDir: remember,
        observer,
      };
      const tagged: CliIO = { out: say, err: say, write: async (t) => say(t), env: io.env, signal: options.signal as AbortSignal };
      try {
        // A run its dead coordinator had started: resumed, after whatever run holds the lock now.
        if (takeover?.runDir) return (await resumeRun(takeover.runDir, { ...options, overlap: 'wait' })).exitCode;
        // Each tick checks the spend guard again (a CSV may have grown), as the schedule stored it.
        return (
          await startRun(data.manifest, {
            ...options,
            outDir: data.out,
            overlap: 'skip',
            budgetUsd: data.budgetUsd,
            confirmOverUsd: data.confirmOverUsd,
            confirmSpend: tickSpendCheck(data.schedule, data.approvedUsd),
          })
        ).exitCode;
      } catch (error) {
        // startRun has told the targets of a tick that did not start, and recorded it under --out.
        return await reportError(error, tagged);
      }
    },
  });
}
