/**
 * A command's options as data: parsing, `genpipe <command> --help` and docs/reference/cli.md all
 * come from the same tables, so none of them can name a flag the others do not. This module
 * imports nothing heavy: `genpipe --help` and every command's help load it.
 */
import type { CliIO } from './io.js';

export interface OptionSpec {
  type: 'string' | 'boolean';
  /** Repeatable: each use adds a value. */
  multiple?: boolean;
  /** How the value is written in help: DIR, N, USD. Only for string options. */
  value?: string;
  /** The default, as a user would type it; absent when there is none (or it depends on context, said in `help`). */
  defaultText?: string;
  /** The unit of the value when it is a number: seconds, US dollars. */
  unit?: string;
  /** The environment variable that sets the same thing when the flag is absent. */
  env?: string;
  /** One paragraph, in plain words, wrapped when printed. */
  help: string;
}

export type OptionTable = Readonly<Record<string, OptionSpec>>;

export interface OptionGroup {
  /** The heading in help and in the reference: "Options", "Connection options". */
  title: string;
  options: OptionTable;
}

/** One `genpipe <name>` command. Commands are listed, with their one-line summary, in command-list.ts. */
export interface Command {
  name: string;
  /** The usage lines and what the command does, printed before the options. */
  usage: string;
  /** The command's option tables, in the order help prints them; parse() accepts exactly these. */
  groups: readonly OptionGroup[];
  /** Printed after the options: exit codes, notes. */
  footer?: string;
  /** Full text for `genpipe <name> --help`, made from the fields above. */
  help: string;
  /** Returns the exit code; expected failures are thrown as GenpipeError. */
  run(argv: readonly string[], io: CliIO): Promise<number>;
}

export type CommandDefinition = Omit<Command, 'help'>;

/** A command whose help is made from its tables. */
export function defineCommand(definition: CommandDefinition): Command {
  return { ...definition, help: commandHelp(definition) };
}

/** Every option of the groups, merged into one table for parse(). */
export function tableOf<G extends readonly OptionGroup[]>(groups: G): MergedOptions<G> {
  return Object.assign({}, ...groups.map((g) => g.options)) as MergedOptions<G>;
}

type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
export type MergedOptions<G extends readonly OptionGroup[]> = UnionToIntersection<G[number]['options']> & OptionTable;

const HELP_WIDTH = 100;
const FLAG_COLUMN = 23;

/** `--out DIR`, `--yes`, `--only SELECTOR` (repeatable). */
export function flagSignature(name: string, spec: OptionSpec): string {
  return `--${name}${spec.type === 'string' ? ` ${spec.value ?? 'VALUE'}` : ''}`;
}

/** The help paragraph with its default, environment variable and repeatability said once, the same way everywhere. */
export function optionSentence(spec: OptionSpec): string {
  const notes = [
    spec.defaultText === undefined ? '' : `default ${spec.defaultText}`,
    spec.env === undefined ? '' : `also ${spec.env}`,
    spec.multiple ? 'repeatable' : '',
  ].filter(Boolean);
  return notes.length === 0 ? spec.help : `${spec.help} (${notes.join('; ')})`;
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines;
}

export function groupHelp(group: OptionGroup): string {
  const lines = [`${group.title}:`];
  const indent = ' '.repeat(FLAG_COLUMN);
  for (const [name, spec] of Object.entries(group.options)) {
    const flag = `  ${flagSignature(name, spec)}`;
    const body = wrap(optionSentence(spec), HELP_WIDTH - FLAG_COLUMN);
    if (flag.length < FLAG_COLUMN - 1) {
      lines.push(`${flag.padEnd(FLAG_COLUMN)}${body[0] ?? ''}`);
      for (const rest of body.slice(1)) lines.push(`${indent}${rest}`);
    } else {
      lines.push(flag);
      for (const rest of body) lines.push(`${indent}${rest}`);
    }
  }
  return lines.join('\n');
}

export function commandHelp(command: CommandDefinition): string {
  return [command.usage, ...command.groups.map(groupHelp), ...(command.footer === undefined ? [] : [command.footer])].join('\n\n');
}
