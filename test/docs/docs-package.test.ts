// The package ships what its pages link: every relative link of README.md and docs/ resolves to a
// file of `npm pack`, and a link to a heading finds it. Tests and benchmarks are not in the package,
// so pages name them as code text. And the pages cite no issue number a reader cannot look up.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { docPages, fencedBlocks, ROOT } from './doc-blocks.js';

/** The page's text without its fenced blocks (a link inside an example is not a link), and without its code spans unless asked. */
function prose(file: string, keepCode = false): string {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const lines = text.split('\n');
  for (const block of fencedBlocks(file, text)) {
    const end = block.line + block.text.split('\n').length - 1;
    for (let i = block.line - 1; i < end && i < lines.length; i++) lines[i] = '';
  }
  const kept = lines.join('\n');
  return keepCode ? kept : kept.replace(/`[^`\n]*`/g, '``');
}

/** A heading's anchor as GitHub and most Markdown viewers make it. */
const slug = (heading: string): string =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, '')
    .replace(/ /g, '-');

const anchorsOf = (file: string): Set<string> => new Set([...prose(file, true).matchAll(/^#+ (.+)$/gm)].map((m) => slug(m[1] as string)));

describe('the pages of README.md and docs/', () => {
  // npm pack takes seconds alone, but much longer on a machine busy with the rest of the suite: a bound, not a pace.
  it('link only to files the package ships, and to headings that exist', { timeout: 150_000 }, () => {
    // Offline and without the update check: packing a folder needs no registry, and loopback is all a test may reach.
    const packed = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts', '--offline'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 140_000,
      env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' },
    });
    expect(packed.status, packed.stderr).toBe(0);
    const files = new Set((JSON.parse(packed.stdout) as { files: { path: string }[] }[])[0]?.files.map((f) => f.path));
    const pages = docPages();
    for (const page of pages) expect(files, `${page} is in the package`).toContain(page);
    const broken: string[] = [];
    let links = 0;
    for (const page of pages) {
      for (const m of prose(page).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1] as string;
        if (/^[a-z]+:/i.test(target)) continue;
        links++;
        const [path = '', fragment] = target.split('#');
        const file = path === '' ? page : normalize(join(dirname(page), path)).replace(/\/$/, '');
        const shipped = files.has(file) || [...files].some((f) => f.startsWith(`${file}/`));
        if (!shipped) broken.push(`${page}: ${target} (not in the package)`);
        else if (fragment !== undefined && file.endsWith('.md') && !anchorsOf(file).has(fragment))
          broken.push(`${page}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
    expect(links).toBeGreaterThan(50);
  });

  it('cite no issue numbers', () => {
    const cited = docPages().flatMap((page) =>
      readFileSync(join(ROOT, page), 'utf8')
        .split('\n')
        .flatMap((line, i) => (/issues? #?[0-9]+/i.test(line) ? [`${page}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(cited).toEqual([]);
  });
});
