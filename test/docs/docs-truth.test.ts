// The pages stay true to the code they describe: every section of the service spec that src/ cites
// has its entry on the service-contract page, and every test or benchmark a page names exists.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../src/session/exit-codes.js';
import { docPages, ROOT } from './doc-blocks.js';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('the pages of docs/', () => {
  it('give every spec section that src/ cites an entry on the service-contract page', () => {
    const cited = new Set<string>();
    for (const file of sourceFiles(join(ROOT, 'src'))) {
      // `§N` or `§N.N`, not an RFC's sections (RFC 9110 §10.2.3): those are not the service's.
      for (const m of readFileSync(file, 'utf8').matchAll(/(RFC \d+ )?§ ?(\d+(?:\.\d+)?)/g)) if (!m[1]) cited.add(m[2] as string);
    }
    expect(cited.size).toBeGreaterThan(20);
    const page = readFileSync(join(ROOT, 'docs', 'service-contract.md'), 'utf8');
    const listed = new Set([...page.matchAll(/§(\d+(?:\.\d+)?)/g)].map((m) => m[1] as string));
    expect([...cited].filter((s) => !listed.has(s)).sort()).toEqual([]);
  });

  it('give every exit code a row of the exit-codes page, and no other', () => {
    const page = readFileSync(join(ROOT, 'docs', 'reference', 'exit-codes.md'), 'utf8');
    const rows = [...page.matchAll(/^\| (\d+) \|/gm)].map((m) => Number(m[1]));
    expect(rows).toEqual(Object.values(EXIT));
  });

  it('name only tests and benchmarks that exist', () => {
    const named = docPages().flatMap((page) =>
      [...readFileSync(join(ROOT, page), 'utf8').matchAll(/`((?:test|bench)\/[\w./-]+\.(?:ts|mjs|md|json))`/g)].map((m) => ({
        page,
        path: m[1] as string,
      })),
    );
    expect(named.length).toBeGreaterThan(30);
    expect(named.filter(({ path }) => !existsSync(join(ROOT, path))).map(({ page, path }) => `${page}: ${path}`)).toEqual([]);
  });
});
