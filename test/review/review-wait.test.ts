// A run waiting on review says so: a `for_each: {step, only: approved}` step
// starts only for approved upstream instances, so a run whose sheets are not reviewed yet ends with
// its clips not started. reviewWaitSentence says how many wait and names `genpipe review DIR`, then
// `genpipe resume DIR`; `genpipe report` prints it; `genpipe plan` shows `only: approved`.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../cli/in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { reviewWaitSentence } from '../../src/review/review-wait.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
let manifest: string;
let runDir: string;

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return runInProcess(args, { GENPIPE_BASE_URL: emu.url, HF_KEY });
}

const decision = (d: 'approved' | 'rejected') => ({ decision: d, starred: false, at: new Date().toISOString() });

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  manifest = join(tempDir(), 'staged.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: staged
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: [1, 2, 3, 4]
    input: { tier: cats, seed: "{{ seed }}" }
  clips:
    model: dop
    for_each: { step: sheets, only: approved }
    matrix:
      motion: [wave, nod, spin]
    input:
      model: dop-turbo
      prompt: "{{ motion }}"
      input_images: [{ type: image_url, image_url: "{{ upstream.outputs.images[0].url }}" }]
`,
  );
  const out = tempDir();
  const run = await cli(['run', manifest, '--out', out, '--rate', '1000', '--quiet']);
  expect(run.code, run.err).toBe(0);
  runDir = findRunDir(out, 'staged');
}, 60_000);

afterAll(async () => {
  await emu?.close();
  cleanTemps();
});

describe('a run waiting on review', () => {
  it('says how many instances wait and names genpipe review DIR, then genpipe resume DIR', async () => {
    expect(await reviewWaitSentence(runDir)).toBe(
      `12 clips instance(s) wait on review: 4 of 4 sheets instance(s) are neither approved nor rejected (clips follows only approved sheets). Review them with \`genpipe review ${runDir}\`, then \`genpipe resume ${runDir}\`.`,
    );
  });

  it('counts only what is still undecided: a rejection is a decision too; none left, no sentence', async () => {
    writeFileSync(
      join(runDir, 'review.json'),
      JSON.stringify({ 'sheets[seed=1]': decision('approved'), 'sheets[seed=2]': decision('rejected') }),
    );
    expect(await reviewWaitSentence(runDir)).toMatch(/^6 clips instance\(s\) wait on review: 2 of 4 sheets instance\(s\) are neither/);
    writeFileSync(
      join(runDir, 'review.json'),
      JSON.stringify({
        'sheets[seed=1]': decision('approved'),
        'sheets[seed=2]': decision('rejected'),
        'sheets[seed=3]': decision('rejected'),
        'sheets[seed=4]': decision('approved'),
      }),
    );
    expect(await reviewWaitSentence(runDir)).toBeUndefined();
    writeFileSync(join(runDir, 'review.json'), '{}');
  });

  it("a damaged review.json is no decision here: the sentence, never an error at a run's end", async () => {
    writeFileSync(join(runDir, 'review.json'), '{not json');
    expect(await reviewWaitSentence(runDir)).toMatch(/^12 clips instance\(s\) wait on review: 4 of 4 sheets/);
    writeFileSync(join(runDir, 'review.json'), '{}');
  });

  it('genpipe report prints it on stderr', async () => {
    const result = await cli(['report', runDir]);
    expect(result.code, result.err).toBe(0);
    expect(result.err).toContain(
      `12 clips instance(s) wait on review: 4 of 4 sheets instance(s) are neither approved nor rejected (clips follows only approved sheets). Review them with \`genpipe review ${runDir}\`, then \`genpipe resume ${runDir}\`.`,
    );
  });

  it('a run with no such step has no sentence', async () => {
    const plain = join(tempDir(), 'plain.yaml');
    writeFileSync(
      plain,
      'version: 1\nname: plain\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1]\n    input: { tier: cats, seed: "{{ seed }}" }\n',
    );
    const out = tempDir();
    expect((await cli(['run', plain, '--out', out, '--rate', '1000', '--quiet'])).code).toBe(0);
    expect(await reviewWaitSentence(findRunDir(out, 'plain'))).toBeUndefined();
  });
});

describe('genpipe plan', () => {
  it('shows `only: approved` on a step that follows approved instances (text and --json)', async () => {
    const text = await cli(['plan', manifest]);
    expect(text.code, text.err).toBe(0);
    expect(text.out).toContain(
      'clips (dop): 12 instance(s), price unknown, unknown; for each sheets, only: approved (after `genpipe review`)',
    );
    const json = await cli(['plan', manifest, '--json']);
    const steps = (JSON.parse(json.out) as { steps: { id: string; for_each_only?: string }[] }).steps;
    expect(steps.find((s) => s.id === 'clips')?.for_each_only).toBe('approved');
    expect(steps.find((s) => s.id === 'sheets')?.for_each_only).toBeUndefined();
  });
});
