// Every flag and manifest field added for runs and reports, refused: exit 2, one sentence (located
// for manifests), and nothing sent or created. The service address points at a closed port, so any
// request would surface as exit 5 instead.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
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
    // A value after a space that starts with a dash: one sentence, not node's three lines.
    [
      ['--budget', '-5'],
      /^genpipe: --budget was given a value that starts with a dash; write it as --budget=VALUE \(genpipe run --help lists the options\)\.$/,
    ],
    // Read as plain decimals only: Number() alone took an empty value for 0 and 0x10 for 16.
    [['--budget='], /^genpipe: --budget takes a number of at least 0, not ""\.$/],
    [['--budget', '0x10'], /^genpipe: --budget takes a number of at least 0, not "0x10"\.$/],
    [['--confirm-over=Infinity'], /^genpipe: --confirm-over takes a number of at least 0, not "Infinity"\.$/],
    // Whole numbers stay exact (a --limit of 2^53 spent, then wrote a plan.json genpipe could not read back).
    [['--limit', '9007199254740992'], /^genpipe: --limit takes a whole number of at most 9007199254740991, not "9007199254740992"\.$/],
    [['--retry-budget', '1e21'], /^genpipe: --retry-budget takes a whole number of at most 9007199254740991, not "1e21"\.$/],
    // A timer of 2^31 ms or more fires at once, every millisecond.
    [['--progress-interval', '100000000'], /^genpipe: --progress-interval takes a whole number of at most 86400, not "100000000"\.$/],
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

  it('genpipe schedule add with a bad --budget or --confirm-over: exit 2, one sentence, before Redis is asked', async () => {
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
    expect(text).toContain(`${path}:4:29: defaults.model_concurrency.dop: must be at least 1`);
    expect(text).toContain(`${path}:5:22: defaults.polling.min_ms: must be at least 10`);
  });

  it('a sweep value given twice (or two that read alike in an id, 7 and "7") is refused at its file:line:col: two instances with one id would be paid twice', async () => {
    for (const [name, values] of [
      ['twice', '[shoes, shoes]'],
      ['alike', '[7, "7"]'],
    ] as const) {
      const path = join(dir, `${name}.yaml`);
      writeFileSync(
        path,
        `version: 1\nname: ${name}\nprices: { marketing-image: 0.04 }\nsteps:\n  ads:\n    model: marketing-image\n    matrix: { p: ${values} }\n    input: { prompt: "{{ p }}", quality: low }\n`,
      );
      const io = capture();
      const out = join(dir, `out-${name}`);
      expect(await main(['run', path, '--out', out, '--yes'], io)).toBe(2);
      expect(io.stderr).toHaveLength(1);
      expect(io.stderr[0]).toBe(
        `genpipe: ${path}:7:18: steps.ads.matrix.p: the values of "p" repeat: items 1 and 2 both name the instance p=${name === 'twice' ? 'shoes' : '7'}; give each value once`,
      );
      expect(existsSync(out)).toBe(false);
    }
  });

  it('a manifest that lets templates read a credential variable (HF_KEY, AWS_SECRET_ACCESS_KEY), prices an instance over US$10,000, or prices a model that does not exist, is refused at its file:line:col', async () => {
    const path = join(dir, 'secret.yaml');
    writeFileSync(
      path,
      'version: 1\nname: secret\nenv: [CAMPAIGN, HF_KEY, AWS_SECRET_ACCESS_KEY]\nprices: { character-sheet: 1e308, marketing_image: 0.04 }\nsteps:\n  a:\n    model: character-sheet\n    input: { tier: cats, brief: "{{ env.CAMPAIGN }}" }\n',
    );
    for (const command of ['validate', 'plan']) {
      const io = capture();
      expect(await main([command, path], io)).toBe(2);
      const text = io.stderr.join('\n');
      expect(text).toContain(`${path}:3:17: env[1]: HF_KEY holds credentials, which templates may not read`);
      expect(text).toContain(`${path}:3:25: env[2]: AWS_SECRET_ACCESS_KEY holds credentials, which templates may not read`);
      expect(text).toContain(`${path}:4:28: prices.character-sheet: must be at most 10000`);
      // A misspelt model prices nothing: refused, with the names it may take.
      expect(text).toContain(`${path}:4:35: prices.marketing_image: marketing_image is not a model: prices are keyed by character-sheet,`);
      expect(text).not.toContain('secret-value');
    }
  });

  it('a run with a raw model path step is refused before anything is sent, not after the steps before it were paid for', async () => {
    const path = join(dir, 'raw.yaml');
    writeFileSync(
      path,
      'version: 1\nname: raw\nsteps:\n  sheets:\n    model: character-sheet\n    matrix: { seed: [1, 2, 3] }\n    input: { tier: cats, seed: "{{ seed }}" }\n  upscale:\n    model: /vendor/new-upscaler\n    for_each: sheets\n    input: { image_url: "{{ upstream.outputs.images[0].url }}" }\n',
    );
    const validated = capture();
    expect(await main(['validate', path], validated)).toBe(0);
    const io = capture();
    const out = join(dir, 'out-raw');
    expect(await main(['run', path, '--out', out, '--yes'], io)).toBe(2);
    expect(io.stderr).toEqual([
      'genpipe: Step upscale uses the raw model path /vendor/new-upscaler, which genpipe can plan but not run yet; nothing was sent.',
    ]);
    expect(existsSync(out)).toBe(false);
  });

  it('a manifest whose bytes are not UTF-8 is refused where they are; one that never ends (/dev/zero) is refused at the size limit, not read until memory runs out', async () => {
    const path = join(dir, 'latin1.yaml');
    writeFileSync(
      path,
      Buffer.concat([
        Buffer.from('version: 1\nname: latin\nsteps:\n  a:\n    model: marketing-image\n    input: { prompt: "Z'),
        Buffer.from([0xfc]),
        Buffer.from('rich" }\n'),
      ]),
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr).toEqual([`genpipe: ${path}:6:24: these bytes are not UTF-8 text: save the manifest as UTF-8`]);
    const endless = capture();
    expect(await main(['validate', '/dev/zero'], endless)).toBe(2);
    expect(endless.stderr).toEqual([`genpipe: /dev/zero:1:1: the manifest is over the limit of ${1024 * 1024} bytes`]);
  });

  it('an exclude list that removes every combination is refused at its file:line:col, as a where filter that keeps no row is: a run would report success having made nothing', async () => {
    const path = join(dir, 'zero.yaml');
    writeFileSync(
      path,
      'version: 1\nname: zero\nsteps:\n  a:\n    model: character-sheet\n    matrix: { tier: [cats, dogs] }\n    exclude: [{ tier: cats }, { tier: dogs }]\n    input: { tier: "{{ tier }}" }\n',
    );
    const io = capture();
    const out = join(dir, 'out-zero');
    expect(await main(['run', path, '--out', out, '--yes'], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${path}:7:14: steps.a.exclude: exclude removes every combination of the sweep: step a would make no instance`,
    ]);
    expect(existsSync(out)).toBe(false);
    // Excluding some of them is fine.
    writeFileSync(path, readFileSync(path, 'utf8').replace(', { tier: dogs }', ''));
    expect(await main(['validate', path], capture())).toBe(0);
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
