import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import { nearest } from '../util/suggest.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Flags every command that talks to the service accepts. */
export const CONNECTION_OPTIONS = {
  config: { type: 'string' },
  'base-url': { type: 'string' },
  'platform-url': { type: 'string' },
  'cdn-url': { type: 'string' },
  vendor: { type: 'string' },
  credentials: { type: 'string' },
  'allow-insecure-http': { type: 'boolean' },
} as const satisfies Options;

export const CONNECTION_HELP = `Connection options:
  --config FILE        config file (YAML or JSON); also GENPIPE_CONFIG
  --base-url URL       main API address; also GENPIPE_BASE_URL
  --platform-url URL   platform address (defaults to --base-url); also GENPIPE_PLATFORM_URL
  --cdn-url URL        agent media address (defaults to --base-url); also GENPIPE_CDN_URL
  --vendor NAME        vendor path segment (default "vendor"); also GENPIPE_VENDOR
  --credentials FILE   key_id:key_secret file (mode 600); or set HF_KEY, HF_CREDENTIALS,
                       or HF_API_KEY with HF_API_SECRET
  --allow-insecure-http
                       accept plain http:// to a host that is not loopback (credentials then
                       travel unencrypted); also GENPIPE_ALLOW_INSECURE_HTTP=1`;

export type Parsed<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>>;

/** Parses argv strictly; an unknown flag (with the nearest known one) or a missing value is invalid input (exit 2). */
export function parse<O extends Options>(argv: readonly string[], options: O, command: string): Parsed<O> {
  try {
    return parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
  } catch (error) {
    const raw = (error as Error).message;
    // `--budget -5`: node's three-line message, as the one sentence it means.
    const ambiguous = /^Option '(--?[^']+)' argument is ambiguous/.exec(raw)?.[1];
    if (ambiguous !== undefined) {
      throw new GenpipeError(
        'invalid_input',
        `${ambiguous} was given a value that starts with a dash; write it as ${ambiguous}=VALUE (genpipe ${command} --help lists the options).`,
      );
    }
    const message = raw
      .replace(/\. To specify a positional argument.*$/s, '')
      .replace(/\.?\n+/g, '; ')
      .replace(/\.$/, '');
    const unknown =
      (error as NodeJS.ErrnoException).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'(--?[^'=]+)/.exec(message)?.[1] : undefined;
    const suggestion = unknown === undefined ? undefined : nearestFlag(unknown, options);
    const hint = suggestion ? `; did you mean ${suggestion}?` : '';
    throw new GenpipeError('invalid_input', `${message}${hint} (genpipe ${command} --help lists the options).`);
  }
}

/** `; did you mean "x"?` for the candidate nearest to `word` (a mistyped subcommand), or nothing. */
export function didYouMean(word: string, candidates: readonly string[]): string {
  const suggestion = nearest(word, candidates);
  return suggestion === undefined ? '' : `; did you mean "${suggestion}"?`;
}

/** The known flag nearest to `flag` (`--emulater` gives `--emulator`), written as it is typed. */
function nearestFlag(flag: string, options: Options): string | undefined {
  const word = flag.replace(/^--?/, '');
  const suggestion = nearest(word, Object.keys(options));
  return suggestion === undefined ? undefined : `--${suggestion}`;
}

export function connectionFlags(values: Record<string, unknown>): ConfigFlags {
  const str = (key: string): string | undefined => (typeof values[key] === 'string' ? (values[key] as string) : undefined);
  return {
    config: str('config'),
    baseUrl: str('base-url'),
    platformUrl: str('platform-url'),
    cdnUrl: str('cdn-url'),
    vendor: str('vendor'),
    credentialsFile: str('credentials'),
    allowInsecureHttp: values['allow-insecure-http'] === true,
  };
}

export function positional(positionals: readonly string[], index: number, name: string, command: string): string {
  const value = positionals[index];
  if (value === undefined || value === '') throw new GenpipeError('invalid_input', `genpipe ${command} needs ${name}.`);
  return value;
}

export function noExtraPositionals(positionals: readonly string[], expected: number, command: string): void {
  if (positionals.length > expected)
    throw new GenpipeError('invalid_input', `Unexpected argument "${positionals[expected]}" for genpipe ${command}.`);
}
