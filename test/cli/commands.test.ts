import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';

function capture(env: NodeJS.ProcessEnv): CliIO & { stdout: string[]; stderr: string[] } {
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

let emulator: Emulator;
let client: GenerationClient;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  // Character sheets stay queued for a minute (so they can be canceled); marketing images finish at once.
  emulator = await startEmulator({
    port: 0,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [60_000, 60_000] }, 'marketing-image': { queuedMs: [0, 0], runMs: [0, 0] } },
  });
  env = { GENPIPE_BASE_URL: emulator.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` };
  client = new GenerationClient(resolveConfig({ env }));
});
afterAll(async () => {
  await client.close();
  await emulator.close();
});

describe('genpipe catalog', () => {
  it('options --tier cats --json lists only the categories for cats, without credentials', async () => {
    const io = capture({ GENPIPE_BASE_URL: emulator.url });
    expect(await main(['catalog', 'options', '--tier', 'cats', '--json'], io)).toBe(0);
    const doc = JSON.parse(io.stdout.join('')) as { config_revision: unknown; categories: { tiers: string[] }[] };
    expect(doc.categories.length).toBeGreaterThan(0);
    expect(doc.categories.every((c) => c.tiers.includes('cats'))).toBe(true);
    expect(doc.config_revision).toBe((await client.options.fetch()).config_revision);
  });

  it('options refuses an unknown tier with exit 2', async () => {
    const io = capture(env);
    expect(await main(['catalog', 'options', '--tier', 'unicorns'], io)).toBe(2);
    expect(io.stderr[0]).toMatch(/^genpipe: Unknown tier "unicorns"; tiers are normal, freak, total/);
  });

  it('options reports a hidden model in one sentence with exit 1', async () => {
    emulator.hideOptionsModel(true);
    try {
      const io = capture(env);
      expect(await main(['catalog', 'options'], io)).toBe(1);
      expect(io.stderr).toHaveLength(1);
      expect(io.stderr[0]).toMatch(/hidden or unavailable/);
    } finally {
      emulator.hideOptionsModel(false);
    }
  });

  it('presets lists every visible preset across all pages', async () => {
    const io = capture(env);
    expect(await main(['catalog', 'presets', '--json'], io)).toBe(0);
    const listed = (JSON.parse(io.stdout.join('')) as { id: string }[]).map((p) => p.id).sort();
    expect(listed).toEqual(
      emulator.presets.presets
        .filter((p) => p.visible)
        .map((p) => p.id)
        .sort(),
    );
  });

  it('presets with wrong credentials exits 5 without printing the secret', async () => {
    const io = capture({ GENPIPE_BASE_URL: emulator.url, HF_KEY: `${DEFAULT_KEY_ID}:not-the-secret-123` });
    expect(await main(['catalog', 'presets'], io)).toBe(5);
    expect(io.stderr.join('\n')).toMatch(/refused the credentials/);
    expect(io.stderr.join('\n')).not.toContain('not-the-secret-123');
  });
});

describe('genpipe status and cancel', () => {
  it('status shows a completed request and its output', async () => {
    const submitted = await client.marketingImage.submit({ prompt: 'a shoe' });
    let status = await client.requests.status(submitted.request_id);
    for (let i = 0; i < 50 && status.status !== 'completed'; i++) {
      await new Promise((r) => setTimeout(r, 20));
      status = await client.requests.status(submitted.request_id);
    }
    const io = capture(env);
    expect(await main(['status', submitted.request_id], io)).toBe(0);
    expect(io.stdout[0]).toBe(`${submitted.request_id}: completed`);
    expect(io.stdout[1]).toMatch(/^image: http:\/\/127\.0\.0\.1:\d+\//);
  });

  it('status of an unknown request exits 1 with one sentence', async () => {
    const io = capture(env);
    expect(await main(['status', '00000000-0000-4000-8000-00000000dead'], io)).toBe(1);
    expect(io.stderr).toEqual([expect.stringMatching(/^genpipe: Not found, or owned by another account/)]);
  });

  it('cancel accepts a queued request (exit 0), idempotently, and refuses a finished one (exit 1)', async () => {
    const queued = await client.characterSheet.submit({ tier: 'cats', seed: 5 }, { idempotencyKey: 'cli-cancel-test' });
    const io = capture(env);
    expect(await main(['cancel', queued.request_id], io)).toBe(0);
    expect(io.stdout).toEqual([`${queued.request_id}: cancel accepted`]);
    expect((await client.requests.status(queued.request_id)).status).toBe('canceled');
    // A cancel repeated after a lost answer is still accepted (and refunds nothing twice).
    expect(await main(['cancel', queued.request_id], capture(env))).toBe(0);

    const finished = await client.marketingImage.submit({ prompt: 'done already' });
    for (let i = 0; i < 50 && (await client.requests.status(finished.request_id)).status !== 'completed'; i++)
      await new Promise((r) => setTimeout(r, 20));
    const late = capture(env);
    expect(await main(['cancel', finished.request_id], late)).toBe(1);
    expect(late.stderr).toEqual([`genpipe: ${finished.request_id} is no longer queued, so it cannot be canceled.`]);
  });
});

describe('catalog, status and cancel with --emulator (an in-process emulator, no configuration at all)', () => {
  it('catalog options and presets answer in full from the embedded emulator', async () => {
    const options = capture({});
    expect(await main(['catalog', 'options', '--emulator', '--json'], options)).toBe(0);
    const doc = JSON.parse(options.stdout.join('')) as { config_revision: unknown; categories: { key: string }[] };
    // The same catalog as an emulator started by hand: the embedded one is the real emulator.
    const reference = await client.options.fetch();
    expect(doc.config_revision).toBe(reference.config_revision);
    expect(doc.categories.map((c) => c.key)).toEqual(reference.categories.map((c) => c.key));

    const presets = capture({});
    expect(await main(['catalog', 'presets', '--emulator', '--json'], presets)).toBe(0);
    const listed = (JSON.parse(presets.stdout.join('')) as { id: string }[]).map((p) => p.id).sort();
    expect(listed.length).toBeGreaterThan(0);
    expect(listed).toEqual(
      emulator.presets.presets
        .filter((p) => p.visible)
        .map((p) => p.id)
        .sort(),
    );
  });

  it('without it and with no address configured, the refusal names --emulator (exit 2)', async () => {
    const io = capture({});
    expect(await main(['catalog', 'options'], io)).toBe(2);
    expect(io.stderr).toEqual([
      'genpipe: No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file (or --emulator).',
    ]);
  });

  it('status of an id the fresh emulator does not know: not found, exit 1', async () => {
    // A real request id of another emulator: the embedded one never saw it.
    const elsewhere = await client.marketingImage.submit({ prompt: 'a hat' });
    const io = capture({});
    expect(await main(['status', elsewhere.request_id, '--emulator'], io)).toBe(1);
    expect(io.stderr).toEqual([expect.stringMatching(/^genpipe: Not found, or owned by another account/)]);
    expect(io.stdout).toEqual([]);
  });

  it("every address is the embedded emulator's, whatever a config file says", async () => {
    const config = join(mkdtempSync(join(tmpdir(), 'genpipe-cli-config-')), 'config.yaml');
    // Cancel calls go to the platform address: this one refuses connections (exit 5 if it were used).
    writeFileSync(config, 'base_url: http://127.0.0.1:9\nplatform_url: http://127.0.0.1:9\ncdn_url: http://127.0.0.1:9\n');
    const io = capture({});
    expect(await main(['cancel', '00000000-0000-4000-8000-00000000dead', '--emulator', '--config', config], io)).toBe(1);
    expect(io.stderr).toEqual([expect.stringMatching(/^genpipe: Not found, or owned by another account/)]);
  });

  it('cancel of an id the fresh emulator does not know: not found, exit 1', async () => {
    const queued = await client.characterSheet.submit({ tier: 'cats', seed: 6 }, { idempotencyKey: 'cli-cancel-embedded' });
    const io = capture({});
    expect(await main(['cancel', queued.request_id, '--emulator'], io)).toBe(1);
    expect(io.stderr).toEqual([expect.stringMatching(/^genpipe: Not found, or owned by another account/)]);
    // The emulator that holds it was not touched.
    expect((await client.requests.status(queued.request_id)).status).toBe('queued');
  });
});
