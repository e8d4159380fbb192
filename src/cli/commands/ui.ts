import { GenpipeError } from '../../api/errors.js';
import { configFilePath, readConfigFile } from '../../api/config.js';
import { isLoopbackHost } from '../../util/loopback-host.js';
import { connectionFlags, noExtraPositionals, parse } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      out: {
        type: 'string',
        value: 'DIR',
        multiple: true,
        defaultText: 'runs_dirs in the config file, else runs/',
        help: 'a folder of run directories (<pipeline>/<run-id>/) to show',
      },
      ...REDIS,
      port: { type: 'string', value: 'N', defaultText: '0 (a free one)', help: 'port to listen on' },
      host: {
        type: 'string',
        value: 'ADDR',
        defaultText: '127.0.0.1',
        help: 'address to bind; one that is not loopback makes every request need the token printed on stderr',
      },
    },
  },
  CONNECTION,
] as const;

/** The folders shown: --out, else `runs_dirs:` of the config file, else runs/. */
function runDirsOf(out: readonly string[] | undefined, configFlag: string | undefined, env: NodeJS.ProcessEnv): string[] {
  if (out !== undefined && out.length > 0) return [...out];
  const path = configFilePath({ config: configFlag }, env);
  const fromFile = path === undefined ? undefined : readConfigFile(path).runs_dirs;
  return fromFile ?? ['runs'];
}

export const uiCommand = defineCommand({
  name: 'ui',
  usage: `Usage: genpipe ui [--out DIR ...] [--redis URL [--queue NAME]] [--port N] [--host ADDR]

A local web page over every run under the folders given (--out, repeatable; else runs_dirs in the
config file; else runs/): each run and each tick that did not start, newest first, with status,
counts, money against the budget, duration and host, filtered by pipeline, status and date, and
updated as runs start and end; a page per run (progress, spend chart, report tables, gallery
with review, remake); two runs side by side; and with --redis, the fleet's workers, jobs and
caps; and /metrics for Prometheus (see the monitoring guide). The first line printed is "listening on http://HOST:PORT"; Ctrl-C
stops it.

It listens on loopback unless --host says otherwise. Then it makes a token, prints it once on
stderr, and answers no request without it. Changes are taken only from its own page.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'ui');
    noExtraPositionals(positionals, 0, 'ui');
    const host = values.host ?? '127.0.0.1';
    const port = values.port === undefined ? 0 : Number(values.port);
    if (!Number.isInteger(port) || port < 0 || port > 65_535)
      throw new GenpipeError('invalid_input', `--port takes a whole number from 0 to 65535, not "${values.port}".`);
    const runDirs = runDirsOf(values.out, values.config, io.env);
    const { startUiServer } = await import('../../ui/ui-server.js');
    const { parseRedisUrl, redisUrlOf, DEFAULT_QUEUE } = await import('../../fleet/redis.js');
    const redisUrl = redisUrlOf(values.redis, io.env, values.config);
    const parsed = redisUrl === undefined ? undefined : parseRedisUrl(redisUrl);
    const redis = parsed === undefined ? undefined : { target: parsed, shown: parsed.shown, queue: values.queue ?? DEFAULT_QUEUE };
    // A remake's resume gets the connection flags the ui was given, and its environment.
    const connectionArgs = Object.keys(CONNECTION.options).flatMap((name) => {
      const value = (values as Record<string, unknown>)[name];
      return value === true ? [`--${name}`] : typeof value === 'string' ? [`--${name}`, value] : [];
    });
    // /metrics, in the Prometheus text format, behind the same access rules as the pages.
    const { createMetrics } = await import('../../metrics/metrics.js');
    const metrics = createMetrics({ runDirs, ...(redis ? { redis: { target: redis.target, queue: redis.queue } } : {}) });
    const server = await startUiServer({
      extraRoutes: [(req, res) => metrics.handle(req, res)],
      runDirs,
      host,
      port,
      remake: { env: { ...process.env, ...io.env }, connectionArgs },
      flags: connectionFlags(values),
      ...(redis ? { redis } : {}),
    });
    io.out(`listening on ${server.url}`);
    if (!isLoopbackHost(host))
      io.err(`token: ${server.token} (every request needs it: open ${server.url}/?token=${server.token}; it is printed only now)`);
    io.out(`showing ${runDirs.join(', ')}; Ctrl-C stops.`);
    await new Promise<void>((resolve) => {
      if (io.signal.aborted) resolve();
      else io.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    await server.close();
    return EXIT.ok;
  },
});
