// Installing and testing genpipe: the Node lines it supports, what its package holds,
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
    expect(pkg.files).toEqual(['bin', 'dist', 'schemas', 'pipelines', 'docs']);
  });

  it('npm test builds only through build-if-stale (npm ci already built), and test:node exists', () => {
    expect(pkg.scripts.test).toContain('node scripts/build-if-stale.mjs');
    expect(pkg.scripts.test).not.toContain('npm run build');
    expect(pkg.scripts.prepare).toBe('npm run build');
    expect(pkg.scripts['test:node']).toBe('node scripts/test-node.mjs');
  });

  it('npm test runs the typecheck, the lint, the format check and the cycle check before vitest; test:unit runs the quick half', () => {
    const steps = pkg.scripts.test?.split(' && ') ?? [];
    expect(steps.slice(-2)).toEqual(['node scripts/checks.mjs typecheck lint format:check cycles complexity', 'vitest run']); // .ci/run passes its reporters to vitest, the last step
    for (const check of ['typecheck', 'lint', 'format:check', 'cycles']) expect(pkg.scripts[check]).toBeTruthy();
    expect(pkg.scripts['test:unit']).toBe('vitest run --config vitest.unit.config.ts');
  });
});

describe('scripts/checks.mjs', () => {
  const script = join(root, 'scripts', 'checks.mjs');
  // A package of its own whose scripts pass, fail, or write output; run with npm from the PATH.
  const packageWith = (scripts: Record<string, string>): string => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-checks-'));
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'checks-fixture', version: '1.0.0', private: true, scripts }));
    return dir;
  };
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_')));
  const checks = (dir: string, names: string[]) => spawnSync(process.execPath, [script, ...names], { cwd: dir, encoding: 'utf8', env });

  it('runs every named script and exits 0 when all pass, printing each one whole after its name', () => {
    const dir = packageWith({ one: 'node -e "console.log(1)"', two: 'node -e "console.log(2)"' });
    const r = checks(dir, ['one', 'two']);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^> one: ok, [\d.]+ s\n1$/m);
    expect(r.stdout).toMatch(/^> two: ok, [\d.]+ s\n2$/m);
  });

  it('exits 1 when any fails, after letting the others finish, and names the failed ones last', () => {
    const dir = packageWith({ good: 'node -e "console.log(7)"', bad: 'node -e "console.error(42); process.exit(3)"' });
    const r = checks(dir, ['bad', 'good']);
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/^> bad: FAILED \(exit 3\), [\d.]+ s\n42$/m);
    expect(r.stdout).toMatch(/^> good: ok/m);
    expect(r.stderr.trim().split('\n').at(-1)).toBe('Checks failed: bad.');
  });

  it('refuses to run nothing', () => {
    expect(checks(packageWith({}), []).status).toBe(2);
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
