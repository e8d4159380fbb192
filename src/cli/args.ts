import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { OptionTable } from './options.js';
import type { ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import { nearest } from '../util/suggest.js';

type Options = NonNullable<ParseArgsConfig['options']>;

export type Parsed<O extends OptionTable> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>
>;

/** Parses argv strictly; an unknown flag (with the nearest known one) or a missing value is invalid input (exit 2). */
export function parse<O extends OptionTable>(argv: readonly string[], table: O, command: string): Parsed<O> {
  // Only what node reads: the table's help text, defaults and units are for people.
  const options: Options = Object.fromEntries(
    Object.entries(table).map(([name, spec]) => [name, spec.multiple ? { type: spec.type, multiple: true } : { type: spec.type }]),
  );
  try {
    return parseArgs({ args: [...argv], options, allowPositionals: true, strict: true }) as Parsed<O>;
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
