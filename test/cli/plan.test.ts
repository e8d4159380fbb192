import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

function capture(env: NodeJS.ProcessEnv = {}): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

const dir = mkdtempSync(join(tmpdir(), 'genpipe-cli-plan-'));
const manifest = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const quickstart = new URL('../../pipelines/quickstart.yaml', import.meta.url).pathname;

describe('genpipe validate', () => {
  it('exits 0 with a summary and the estimate for a valid manifest', async () => {
    const io = capture();
    expect(await main(['validate', quickstart], io)).toBe(0);
    expect(io.stdout).toEqual([
      `${quickstart}: valid; 1 step(s), 6 instance(s), estimated US$0.30`,
      "price of cats: US$0.05 each, from the service's list price",
    ]);
  });

  it('says where each price comes from, and flags a token-priced model and a flat guess for it', async () => {
    const path = manifest(
      'token.yaml',
      'version: 1\nname: token\nprices: { marketing-image: 0.04 }\nsteps:\n  ads:\n    model: marketing-image\n    input: { prompt: hi }\n' +
        '  own:\n    model: character-sheet\n    price_usd: 0.07\n    input: { tier: cats, seed: 1 }\n' +
        '  clip:\n    model: dop\n    input: { prompt: hi }\n',
    );
    const io = capture();
    expect(await main(['validate', path], io), io.stderr.join('\n')).toBe(0);
    // The summary's estimate names the unpriced instance beside the priced sum.
    expect(io.stdout[0]).toMatch(/estimated US\$0\.11 \+ 1 unpriced$/);
    expect(io.stdout.slice(1)).toEqual([
      "price of ads: US$0.04 each, from the manifest's prices table (a flat guess); token-priced, so provisional: the service charges an estimate at submit and reconciles it to actual token usage later, which genpipe cannot see",
      "price of own: US$0.07 each, from the step's price_usd",
      'price of clip: no price: unpriced',
    ]);
    const json = capture();
    expect(await main(['plan', path, '--json'], json)).toBe(0);
    const steps = (JSON.parse(json.stdout.join('')) as { steps: { id: string; price_source: string; token_priced: boolean }[] }).steps;
    expect(steps.map((s) => [s.id, s.price_source, s.token_priced])).toEqual([
      ['ads', 'manifest', true],
      ['own', 'step', false],
      ['clip', 'none', false],
    ]);
    const human = capture();
    expect(await main(['plan', path], human)).toBe(0);
    expect(human.stdout).toContain(
      "price of ads: US$0.04 each, from the manifest's prices table (a flat guess); token-priced, so provisional: the service charges an estimate at submit and reconciles it to actual token usage later, which genpipe cannot see",
    );
  });

  it('never estimates a manifest whose every instance is unpriced at US$0.00', async () => {
    const path = manifest('unpriced.yaml', 'version: 1\nname: unpriced\nsteps:\n  clip:\n    model: dop\n    input: { prompt: hi }\n');
    const io = capture();
    expect(await main(['validate', path], io), io.stderr.join('\n')).toBe(0);
    expect(io.stdout[0]).toMatch(/estimated unpriced \(1 instance\)$/);
    expect(io.stdout[0]).not.toContain('US$0.00');
  });

  it('exits 2 listing every problem with file:line:col, and no stack trace', async () => {
    const path = manifest('bad.yaml', 'version: 1\nname: bad\nstepz: {}\nsteps:\n  a:\n    model: character-sheet\n    retries: -1\n');
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    const text = io.stderr.join('\n');
    expect(io.stderr[0]).toBe(`genpipe: ${path}:3:1: stepz: unknown key "stepz"; did you mean "steps"? (2 problems; all listed below)`);
    expect(text).toContain(`${path}:7:14: steps.a.retries: must be at least 0`);
    expect(text).not.toMatch(/\n\s+at /);
  });

  it('exits 2 listing every invalid instance, at the sweep value that breaks it, or at the template when every value does', async () => {
    const path = manifest(
      'instances.yaml',
      'version: 1\nname: bad\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: [0, 1, 2000000] }\n    input:\n      seed: "{{ seed }}"\n      brief: "{{ seed }}"\n',
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr.slice(1)).toEqual([
      `  ${path}:6:22: steps.a.matrix.seed[0]: 0 must be at least 1; read by steps.a.input.seed at ${path}:8:13`,
      `  ${path}:6:28: steps.a.matrix.seed[2]: 2000000 must be at most 1000000; read by steps.a.input.seed at ${path}:8:13`,
      // Every value of the sweep breaks the brief: the template is at fault, and named.
      `  ${path}:9:14: steps.a.input.brief: a[seed=0]: must be text (and 2 more instances)`,
    ]);
  });

  it('exits 2 for a file that does not exist, naming it (not ENOENT at 1:1)', async () => {
    const io = capture();
    const missing = join(dir, 'missing.yaml');
    expect(await main(['validate', missing], io)).toBe(2);
    expect(io.stderr).toEqual([`genpipe: ${missing}: the manifest file does not exist`]);
  });
});

describe('genpipe plan', () => {
  it('shows steps, samples and the estimated total', async () => {
    const io = capture();
    expect(await main(['plan', quickstart, '--limit', '1'], io)).toBe(0);
    expect(io.stdout[0]).toBe('pipeline quickstart: 1 step(s), 6 instance(s)');
    expect(io.stdout).toContain('cats (character-sheet): 6 instance(s), US$0.05 each, US$0.30');
    expect(io.stdout).toContain('  ... and 5 more');
    expect(io.stdout.at(-1)).toBe('estimated total: US$0.30');
  });

  it('--json streams one JSON document holding every instance with its key', async () => {
    const io = capture();
    expect(await main(['plan', quickstart, '--json'], io)).toBe(0);
    const doc = JSON.parse(io.stdout.join('')) as {
      name: string;
      steps: { id: string; count: number }[];
      estimate: { known_usd: number };
      instances: { id: string; key: string; body: unknown }[];
    };
    expect(doc.name).toBe('quickstart');
    expect(doc.steps).toMatchObject([{ id: 'cats', count: 6 }]);
    expect(doc.estimate.known_usd).toBe(0.3);
    expect(doc.instances).toHaveLength(6);
    expect(new Set(doc.instances.map((i) => i.key)).size).toBe(6);
    expect(doc.instances[0]).toMatchObject({ id: 'cats[seed=1,variation_index=0]', body: { tier: 'cats', seed: 1, variation_index: 0 } });
  });

  it('--json keeps every instance whole across the spool buffer, multi-byte text included', async () => {
    // 3,000 instances of about 1.2 KB of three-byte characters: several megabytes, so the spool's
    // 1 MB buffer is flushed many times, and a line may end just short of its end.
    const brief = '猫'.repeat(400);
    const path = manifest(
      'spool.yaml',
      `version: 1\nname: spool\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: 3000 } } }\n    input: { seed: "{{ seed }}", brief: "${brief}" }\n`,
    );
    const io = capture();
    expect(await main(['plan', path, '--json'], io)).toBe(0);
    const doc = JSON.parse(io.stdout.join('')) as { instances: { id: string; body: { seed: number; brief: string } }[] };
    expect(doc.instances).toHaveLength(3000);
    doc.instances.forEach((instance, i) => {
      expect(instance.id).toBe(`a[seed=${i + 1}]`);
      expect(instance.body).toMatchObject({ seed: i + 1, brief });
    });
  });

  it('refuses a --limit that is not a whole number with exit 2', async () => {
    const io = capture();
    expect(await main(['plan', quickstart, '--limit', 'ten'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: --limit takes a whole number, not "ten".']);
  });

  it('warns when the estimate is over the budget', async () => {
    const path = manifest(
      'budget.yaml',
      'version: 1\nname: budget\ndefaults: { budget_usd: 0.1 }\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: [1, 2, 3] }\n    input: { seed: "{{ seed }}" }\n',
    );
    const io = capture();
    expect(await main(['plan', path], io)).toBe(0);
    // Both figures, and where the budget was set (line 3, col 25: the value of budget_usd).
    expect(io.stdout.at(-1)).toBe(
      `warning: the estimate of US$0.15 is over the budget of US$0.10 (budget_usd 0.1 at ${path}:3:25); a run stops submitting before going over it`,
    );
  });
});
