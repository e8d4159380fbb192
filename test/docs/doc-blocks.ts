// The fenced blocks of README.md and docs/ that a test runs: those whose info string names a kind
// after the language (`sh test`, `yaml manifest`, `cron test`, `ini test`). docs/CONTRIBUTING.md
// says what each kind means to the writer.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

export const ROOT = new URL('../..', import.meta.url).pathname;

export interface DocBlock {
  /** The page, relative to the repository: `docs/guides/nightly.md`. */
  file: string;
  /** The line of the opening fence, 1-based: a failure names `file:line`. */
  line: number;
  /** The language word of the info string: `sh`, `yaml`, `cron`, `ini`. */
  lang: string;
  /** The words after it: `['test']`, `['test', 'serve']`, `['test', 'exit=3']`, `['manifest']`. */
  tags: string[];
  text: string;
  /** The paragraph right after the block: what the page says of it ("It prints ..."). */
  after: string;
}

/** README.md and every Markdown page under docs/, in a stable order. */
export function docPages(): string[] {
  const pages = ['README.md'];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) pages.push(relative(ROOT, path));
    }
  };
  walk(join(ROOT, 'docs'));
  return pages;
}

/**
 * Every fenced block of a page with its info string. A fence may be indented (a block inside a
 * list item): the block's lines lose that indent, as Markdown renders them.
 */
export function fencedBlocks(file: string, markdown: string): DocBlock[] {
  const blocks: DocBlock[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)(`{3,})(.*)$/.exec(lines[i] as string);
    if (!open) continue;
    const indent = (open[1] as string).length;
    const fence = open[2] as string;
    const [lang = '', ...tags] = (open[3] as string).trim().split(/\s+/).filter(Boolean);
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const line = lines[j] as string;
      if (line.trim().startsWith(fence) && line.trim().replace(/`/g, '') === '') break;
      body.push(line.slice(Math.min(indent, line.length - line.trimStart().length)));
    }
    blocks.push({ file, line: i + 1, lang, tags, text: body.join('\n') + '\n', after: paragraphAfter(lines, j + 1) });
    i = j;
  }
  return blocks;
}

/** The lines from `start` to the next blank line or fence, blank lines before them passed over. */
function paragraphAfter(lines: string[], start: number): string {
  let i = start;
  while (i < lines.length && (lines[i] as string).trim() === '') i++;
  const paragraph: string[] = [];
  for (; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line === '' || line.startsWith('```')) break;
    paragraph.push(line);
  }
  return paragraph.join(' ');
}

/**
 * What the paragraph after a block says its command prints, as patterns its output must match:
 * each quote of several words in a sentence that begins "It prints". In a quote, `<run-id>` (any
 * `<word>`) stands for one word, `PORT` for a number, and `...` for anything.
 */
export function saidToPrint(block: Pick<DocBlock, 'after'>): RegExp[] {
  const patterns: RegExp[] = [];
  // A sentence ends at a full stop outside a quote.
  for (const sentence of block.after.split(/(?<=^(?:[^`]*`[^`]*`)*[^`]*\.)\s+/)) {
    if (!sentence.startsWith('It prints')) continue;
    for (const [, quote] of sentence.matchAll(/`([^`]+)`/g)) {
      if (!(quote as string).includes(' ')) continue;
      patterns.push(outputPattern(quote as string));
    }
  }
  return patterns;
}

/** A quote of a page as a pattern of a command's output (see saidToPrint). */
export function outputPattern(quote: string): RegExp {
  const parts = quote.split(/(<[^>]+>|\bPORT\b|\.\.\.)/);
  const source = parts
    .map((part, i) => {
      if (i % 2 === 0) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      if (part === '...') return '.*';
      return part === 'PORT' ? '\\d+' : '\\S+';
    })
    .join('');
  return new RegExp(source);
}

/**
 * The kinds of block a test runs, by the first word after the language, in
 * test/docs/doc-examples.test.ts. Two kinds run elsewhere: `library` (the library guide's script,
 * run through the built package by test/session/readme-example.test.ts), `fleet` and `registry`.
 */
export const KINDS = ['test', 'manifest', 'config', 'faults', 'accounts', 'prometheus', 'review', 'ci', 'hosts'] as const;
// `registry`: commands that fetch packages from the npm registry, which no test may reach (a test
// talks to 127.0.0.1 only); test/docs/docs-package.test.ts packs what they install.
// `fleet`: the README's local fleet, run by test/docs/fleet-recipe.test.ts.
const RUN_ELSEWHERE = ['library', 'registry', 'fleet'];

/** Languages whose blocks a reader may copy and run: each such block needs a kind. `text` is prose. */
const RUNNABLE = new Set(['sh', 'bash', 'yaml', 'yml', 'json', 'js', 'ts', 'cron', 'ini']);

function allBlocks(): DocBlock[] {
  return docPages().flatMap((file) => fencedBlocks(file, readFileSync(join(ROOT, file), 'utf8')));
}

/** The blocks a test runs or validates, over README.md and docs/. */
export function testedBlocks(): DocBlock[] {
  return allBlocks().filter((b) => (KINDS as readonly string[]).includes(b.tags[0] ?? ''));
}

/** A block in a language that runs, which no test runs: shown only. */
export function isShownOnly(block: DocBlock): boolean {
  const kind = block.tags[0] ?? '';
  return RUNNABLE.has(block.lang) && !(KINDS as readonly string[]).includes(kind) && !RUN_ELSEWHERE.includes(kind);
}

/** Every block that is shown and never run: none, once each example has its kind. */
export function shownBlocks(): DocBlock[] {
  return allBlocks().filter(isShownOnly);
}
