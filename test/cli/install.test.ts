// Installing and testing genpipe (issue 28): the Node lines it supports, what its package holds,
// and `npm test` building only when the build is older than the sources.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = new URL('../../', import.meta.url).pathname;
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  engines: { node: string };
  files: string[];
  scripts: Record<string, string>;
};

describe('the package', () => {
  it('names Node 20.18+, 22 and 24', () => {
    expect(pkg.engines.node).toBe('^20.18.0 || ^22.0.0 || ^24.0.0');
  });

  it('ships the built CLI, the schemas and the example pipelines, so a global install runs from anywhere', () => {
    expect(pkg.files).toEqual(['bin', 'dist', 'schemas', 'pipelines']);
  });

  it('npm test builds only through build-if-stale (npm ci already built), and test:node exists', () => {
    expect(pkg.scripts.test).toContain('node scripts/build-if-stale.mjs');
    expect(pkg.scripts.test).not.toContain('npm run build');
    expect(pkg.scripts.prepare).toBe('npm run build');
    expect(pkg.scripts['test:node']).toBe('node scripts/test-node.mjs');
  });

  it('npm test lints and checks the format after the typecheck, before vitest; test:unit runs the quick half', () => {
    const steps = pkg.scripts.test?.split(' && ') ?? [];
    const at = (step: string): number => steps.indexOf(step);
    expect(at('npm run lint')).toBeGreaterThan(at('npm run typecheck'));
    expect(at('npm run format:check')).toBeGreaterThan(at('npm run typecheck'));
    expect(steps.at(-1)).toBe('vitest run'); // .ci/run passes its reporters to vitest, the last step
    expect(pkg.scripts['test:unit']).toBe('vitest run --config vitest.unit.config.ts');
  });
});

describe('build-if-stale', () => {
  const script = join(root, 'scripts', 'build-if-stale.mjs');
  const checkAt = (dir: string): string =>
    spawnSync(process.execPath, [script, '--check', '--root', dir], { encoding: 'utf8' }).stdout.trim();

  it('is stale without a build, up to date after one, stale again once a source or folder is newer', () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-stale-'));
    mkdirSync(join(dir, 'src', 'cli'), { recursive: true });
    writeFileSync(join(dir, 'src', 'cli', 'main.ts'), '');
    writeFileSync(join(dir, 'package.json'), '{}');
    const at = (path: string, seconds: number): void => utimesSync(path, seconds, seconds);
    for (const path of [join(dir, 'src', 'cli', 'main.ts'), join(dir, 'src', 'cli'), join(dir, 'src'), join(dir, 'package.json')])
      at(path, 1_000);
    expect(checkAt(dir)).toBe('stale');
    mkdirSync(join(dir, 'dist', 'bundle'), { recursive: true });
    writeFileSync(join(dir, 'dist', 'bundle', 'main.js'), '');
    at(join(dir, 'dist', 'bundle', 'main.js'), 2_000);
    expect(checkAt(dir)).toBe('up to date');
    at(join(dir, 'src', 'cli', 'main.ts'), 3_000);
    expect(checkAt(dir)).toBe('stale');
    at(join(dir, 'src', 'cli', 'main.ts'), 1_000);
    // A deleted or added file shows as its folder's time.
    at(join(dir, 'src', 'cli'), 3_000);
    expect(checkAt(dir)).toBe('stale');
    at(join(dir, 'src', 'cli'), 1_000);
    at(join(dir, 'package.json'), 3_000);
    expect(checkAt(dir)).toBe('stale');
  });
});
