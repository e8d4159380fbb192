import { configFileCandidates, describeConfig, type FoundConfigFile } from '../../api/config.js';
import { connectionFlags, noExtraPositionals, parse } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { existsSync } from 'node:fs';

const GROUPS = [
  {
    title: 'Options',
    options: {
      json: { type: 'boolean', help: 'print {file, search, settings: [{name, value, source, detail}]} as JSON' },
      redis: REDIS.redis,
    },
  },
  CONNECTION,
] as const;

const SOURCE_WORD = { flag: 'flag', environment: 'environment', file: 'file', default: 'default' } as const;

function howFound(file: FoundConfigFile): string {
  if (file.from === '--config' || file.from === 'GENPIPE_CONFIG') return `named by ${file.from}`;
  return file.from === 'user' ? 'found: the user config' : 'found: the system config';
}

export const configCommand = defineCommand({
  name: 'config',
  usage: `Usage: genpipe config [--json] [connection options]

Prints every setting the other commands would use here, with where it came from: a flag, the
environment, the config file or the default. Secrets print as set or not set. The config file is
--config, else GENPIPE_CONFIG, else the first that exists of
\${XDG_CONFIG_HOME:-~/.config}/genpipe/config.yaml and /etc/genpipe/config.yaml.
Nothing is sent. Exit codes: 0 printed, 2 the config file cannot be read or is invalid.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'config');
    noExtraPositionals(positionals, 0, 'config');
    const flags = { ...connectionFlags(values), redis: values.redis };
    const { file, settings } = describeConfig(flags, io.env);
    const search = configFileCandidates(io.env).map((c) => ({ path: c.path, exists: existsSync(c.path) }));
    if (values.json) {
      io.out(JSON.stringify({ file: file ?? null, search, settings }, null, 2));
      return EXIT.ok;
    }
    io.out(`config file: ${file ? `${file.path} (${howFound(file)})` : 'none'}`);
    if (file === undefined || (file.from !== '--config' && file.from !== 'GENPIPE_CONFIG'))
      io.out(`  looked for: ${search.map((s) => `${s.path}${s.exists ? '' : ' (absent)'}`).join(', ')}`);
    const width = Math.max(...settings.map((s) => s.name.length));
    for (const s of settings)
      io.out(`${s.name.padEnd(width)}  ${s.value}  (${SOURCE_WORD[s.source]}${s.detail === '' ? '' : `: ${s.detail}`})`);
    return EXIT.ok;
  },
});
