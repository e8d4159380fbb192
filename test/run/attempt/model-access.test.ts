// An account without access to a step's model (service spec §5 "model access"; the emulator's
// accounts file `models: [...]`): the service refuses the first submit with 403, and genpipe sends
// no other instance of that step, names the step's `model:` in the manifest, spends nothing on it,
// goes on with the other steps, and exits 1. Against the in-process emulator on 127.0.0.1.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { accountsFromFile } from '../../../src/emulator/accounts.js';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { runInProcess } from '../../cli/in-process.js';

const LIMITED = '55555555-5555-4555-8555-555555555555';
const SECRET = 'limited-secret';

let emu: Emulator;
let dir: string;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'genpipe-model-access-'));
  const accounts = join(dir, 'accounts.yaml');
  writeFileSync(accounts, `accounts:\n  - key_id: ${LIMITED}\n    secret: ${SECRET}\n    models: [marketing-image]\n`);
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {}, accounts: accountsFromFile(accounts) });
});
afterEach(async () => {
  await emu.close();
});

const genpipe = (...argv: string[]) => runInProcess(argv, { GENPIPE_BASE_URL: emu.url, HF_KEY: `${LIMITED}:${SECRET}` });
/**
 * The ledger's net without the service's later reconciliation of token-priced images to actual
 * usage (which genpipe cannot see): what was charged at submit, less refunds of failures.
 */
const chargedUsd = (): number =>
  Math.round(emu.ledger.netMicros((e) => e.key_id === LIMITED && !(e.kind === 'refund' && /reconciled/.test(e.reason)))) / 1e6;
/** POSTs that reached the emulator on a submit route, by route name. */
const posts = (word: string): number =>
  [...emu.stats.byRoute].filter(([name]) => name.startsWith('POST') && name.includes(word)).reduce((n, [, c]) => n + c, 0);

const MANIFEST = `version: 1
name: access
# The emulator's charge at submit for these images (token-priced: prompt length, resolution, quality).
prices: { marketing-image: 0.01026 }
steps:
  sheets:
    model: character-sheet
    matrix: { seed: { range: { from: 1, to: 6 } } }
    input: { tier: cats, seed: "{{ seed }}" }
  ads:
    model: marketing-image
    matrix: { n: [1, 2] }
    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }
`;

interface Report {
  total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
  steps: { name: string; netUsd: number; counts: Record<string, number> }[];
}

describe('a step whose model the account may not use', () => {
  it(
    'is refused once: one POST for its 6 instances, the model: line named, nothing spent on it, the other step made, exit 1',
    { timeout: 60_000 },
    async () => {
      const path = join(dir, 'access.yaml');
      writeFileSync(path, MANIFEST);
      const out = join(dir, 'runs');
      const run = await genpipe('run', path, '--out', out, '--quiet');
      expect(run.code, run.err).toBe(1);
      // Exactly one submit of the step reached the service; the other step went on.
      expect(posts('ai-influencer')).toBe(1);
      expect((emu.requests.inspect({}) as { model?: string }[]).filter((r) => r.model === 'marketing-image')).toHaveLength(2);
      // One sentence, naming the model and where the manifest names it (line 7, col 12: `model:`'s value).
      const lines = run.err.split('\n').filter((l) => l.includes('no access'));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`The account has no access to the character-sheet model (steps.sheets.model at ${path}:7:12)`);
      expect(lines[0]).toContain('nothing was charged');
      expect(run.err).not.toMatch(/agent API|stack|\n\s+at /);
      // Spent nothing on it: the report says 0 for the step, and its total equals the ledger.
      const runDir = join(out, 'access', readdirSync(join(out, 'access')).find((n) => !n.startsWith('.')) as string);
      const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as Report;
      const sheets = report.steps.find((s) => s.name === 'sheets');
      expect(sheets?.netUsd).toBe(0);
      expect(sheets?.counts.completed).toBe(0);
      expect(sheets?.counts.unknown).toBe(0);
      expect(report.total.unknownUsd).toBe(0);
      expect(report.total.netUsd).toBe(0.02052);
      expect(report.total.netUsd).toBe(chargedUsd());
      expect(report.total.counts.completed).toBe(2);

      // Still refused on a resume: once more one POST, and the same exit.
      const again = await genpipe('resume', runDir, '--quiet');
      expect(again.code, again.err).toBe(1);
      expect(posts('ai-influencer')).toBe(2);
      expect((emu.requests.inspect({}) as { model?: string }[]).filter((r) => r.model === 'marketing-image')).toHaveLength(2);
    },
  );
});
