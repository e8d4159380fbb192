// The library guide's example, run as written: the quick start from a script,
// through the package's own export (the built dist/, as a user imports it), against the embedded emulator.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, symlinkSync, writeFileSync, mkdirSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../..', import.meta.url).pathname;

describe('the library guide example of the run session library', () => {
  it('runs the quick start from a 10-line script and reports what it paid', { timeout: 60_000 }, () => {
    const guide = readFileSync(join(ROOT, 'docs', 'guides', 'library.md'), 'utf8');
    const example = /```js library\n([\s\S]*?)```/.exec(guide)?.[1];
    expect(example, 'the library guide has the example').toBeDefined();
    expect(example!.trim().split('\n').length).toBeLessThanOrEqual(10);
    // A folder that imports `genpipe` as an installed package would: node_modules/genpipe -> the repository.
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-readme-'));
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(ROOT, join(dir, 'node_modules', 'genpipe'), 'dir');
    cpSync(join(ROOT, 'pipelines'), join(dir, 'pipelines'), { recursive: true });
    writeFileSync(join(dir, 'quickstart.mjs'), example!);
    const ran = spawnSync(process.execPath, ['quickstart.mjs'], {
      cwd: dir,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' },
      timeout: 50_000,
    });
    expect(ran.status, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/^6 completed in \S+runs\/quickstart\/\S+\nnet US\$0\.3, exit code 0\n$/);
  });
});
