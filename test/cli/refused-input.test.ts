// Every flag and manifest field added for runs and reports, refused: exit 2, one sentence (located
// for manifests), and nothing sent or created. The service address points at a closed port, so any
// request would surface as exit 5 instead.
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

function capture(): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const env = { GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value' };
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

const dir = mkdtempSync(join(tmpdir(), 'genpipe-refused-'));
const quickstart = new URL('../../pipelines/quickstart.yaml', import.meta.url).pathname;

describe('refused run and report input', () => {
  const cases: [string[], RegExp][] = [
    [['--concurrency', '0'], /^genpipe: --concurrency takes a whole number of at least 1, not "0"\.$/],
    [['--concurrency', '2.5'], /^genpipe: --concurrency takes a whole number of at least 1, not "2\.5"\.$/],
    [['--rate', 'fast'], /^genpipe: --rate takes a number of at least 0\.01, not "fast"\.$/],
    [['--budget=-1'], /^genpipe: --budget takes a number of at least 0, not "-1"\.$/],
    [['--overlap', 'sometimes'], /^genpipe: --overlap takes skip, wait or allow, not "sometimes"\.$/],
    [['--progress-interval', '0'], /^genpipe: --progress-interval takes a whole number of at least 1, not "0"\.$/],
    [['--progress-interval', '1m'], /^genpipe: --progress-interval takes a whole number of at least 1, not "1m"\.$/],
    [['--listen', '127.0.0.1:8787'], /^genpipe: --webhook-url and --listen go together/],
  ];
  for (const [flags, message] of cases) {
    it(`genpipe run ${flags.join(' ')}: exit 2, one sentence, no run directory`, async () => {
      const io = capture();
      const out = join(dir, `out-${flags.join('-').replace(/[^a-z0-9-]/gi, '')}`);
      expect(await main(['run', quickstart, '--out', out, ...flags], io)).toBe(2);
      expect(io.stderr).toHaveLength(1);
      expect(io.stderr[0]).toMatch(message);
      expect(existsSync(out)).toBe(false);
    });
  }

  it('genpipe schedule add with a bad --budget or --confirm-over: exit 2, one sentence, before Redis is asked (issue 26)', async () => {
    for (const [flags, message] of [
      [['--budget', 'lots'], /^genpipe: --budget takes a number of at least 0, not "lots"\.$/],
      [['--confirm-over=-5'], /^genpipe: --confirm-over takes a number of at least 0, not "-5"\.$/],
    ] as [string[], RegExp][]) {
      const io = capture();
      // Nothing listens at port 1: a Redis that was asked would be exit 5, not 2.
      expect(
        await main(
          ['schedule', 'add', quickstart, '--cron', '30 2 * * *', '--out', join(dir, 'sched'), '--redis', 'redis://127.0.0.1:1', ...flags],
          io,
        ),
      ).toBe(2);
      expect(io.stderr).toHaveLength(1);
      expect(io.stderr[0]).toMatch(message);
    }
  });

  it('genpipe report with two formats, or on a folder that is not a run, exits 2', async () => {
    const both = capture();
    expect(await main(['report', dir, '--json', '--csv'], both)).toBe(2);
    expect(both.stderr).toEqual(['genpipe: Choose one of --json, --csv and --md.']);
    const notRun = capture();
    expect(await main(['report', dir], notRun)).toBe(2);
    expect(notRun.stderr[0]).toMatch(/is not a run directory \(no readable plan\.json\)/);
  });

  it('manifest fields model_concurrency and polling.min_ms are refused out of range, at their file:line:col', async () => {
    const path = join(dir, 'limits.yaml');
    writeFileSync(
      path,
      'version: 1\nname: limits\ndefaults:\n  model_concurrency: { dop: 0 }\n  polling: { min_ms: 5 }\nsteps:\n  a:\n    model: dop\n    input: { prompt: x }\n',
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    const text = io.stderr.join('\n');
    expect(text).toContain(`${path}:4:29: defaults.model_concurrency.dop: Too small: expected number to be >=1`);
    expect(text).toContain(`${path}:5:22: defaults.polling.min_ms: Too small: expected number to be >=10`);
  });

  it('a budget with a step of unknown price is refused before anything is sent', async () => {
    const path = join(dir, 'unpriced.yaml');
    writeFileSync(
      path,
      'version: 1\nname: unpriced\ndefaults: { budget_usd: 5 }\nsteps:\n  ads:\n    model: marketing-image\n    input: { prompt: shoes }\n',
    );
    const io = capture();
    const out = join(dir, 'out-unpriced');
    expect(await main(['run', path, '--out', out], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${path}:5:3: steps.ads: a budget is set (budget_usd 5 at ${path}:3:25) but step ads (marketing-image) has no price, so the budget cannot be kept; ` +
        `add its price in US$ per instance to the manifest's prices table (prices: { "marketing-image": 0.10 }) or set price_usd on the step`,
    ]);
    expect(existsSync(out)).toBe(false);
  });
});
