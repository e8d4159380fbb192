// The layer rule, so that the run cannot depend on what shows it: src/run/ imports none of its views or callers,
// the emulator none of the runner, sink/ none of its callers, session/ nothing of the CLI. scripts/check-cycles.mjs (`npm run
// cycles`, in `npm test`) is run here on small trees: one that breaks the rule, one that keeps it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../run/runner-helpers.js';

const script = new URL('../../scripts/check-cycles.mjs', import.meta.url).pathname;

function tree(files: Record<string, string>): string {
  const root = tempDir('genpipe-layers-');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

const check = (root: string): { code: number | null; output: string } => {
  const result = spawnSync(process.execPath, [script, root], { encoding: 'utf8' });
  return { code: result.status, output: result.stdout + result.stderr };
};

describe('the layer rule', () => {
  it('refuses run/ importing a view (gallery/), statically or dynamically, and the emulator importing the runner', () => {
    for (const [from, text] of [
      ['run/driver.ts', "import { view } from '../gallery/page.js';\nexport const x = view;\n"],
      ['run/driver.ts', "export const load = () => import('../report/write.js');\n"],
      ['emulator/server.ts', "import type { Plan } from '../run/plan.js';\nexport type P = Plan;\n"],
      // A bare import, run for its effects, and the session (the library under the CLI) importing the CLI.
      ['run/driver.ts', "import '../gallery/page.js';\nexport {};\n"],
      ['session/start.ts', "import { main } from '../cli/main.js';\nexport const m = main;\n"],
    ] as const) {
      const root = tree({
        [from]: text,
        'gallery/page.ts': 'export const view = 1;\n',
        'report/write.ts': 'export {};\n',
        'run/plan.ts': 'export type Plan = 1;\n',
        'cli/main.ts': 'export const main = 1;\n',
      });
      const result = check(root);
      expect(result.code, result.output).not.toBe(0);
      expect(result.output).toContain(from.split('/')[0] as string);
    }
  });

  it('accepts the same files the other way round: a view importing run/', () => {
    const root = tree({
      'run/driver.ts': 'export const run = 1;\n',
      'gallery/page.ts': "import { run } from '../run/driver.js';\nexport const view = run;\n",
      'session/start.ts': "import '../run/driver.js';\nexport {};\n",
      'cli/main.ts': "import { run } from '../run/driver.js';\nimport '../session/start.js';\nexport const main = run;\n",
    });
    const result = check(root);
    expect(result.code, result.output).toBe(0);
  });
});
