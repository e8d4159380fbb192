// A seedless remake (`--retry rejected` on a marketing image) journals its intent before its POST:
// a crash in between (SIGKILL just after the intent is on disk) leaves the remake unknown, never
// sent twice. A plain resume does not resend it; its price stays counted, as unknown; the ledger
// holds the first attempt alone. The real CLI, as a child process, against the emulator on port 0.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ReviewStore } from '../../../src/review/review-store.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, tempDir, withEmulator } from '../runner-helpers.js';

afterAll(cleanTemps);

interface Total {
  netUsd: number;
  unknownUsd: number;
  counts: Record<string, number>;
}

describe('a crash between a seedless remake intent and its POST', () => {
  it('leaves the remake unknown, never resent by a plain resume, its price counted apart', { timeout: 90_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const path = join(dir, 'heroes.yaml');
      writeFileSync(
        path,
        'version: 1\nname: heroes\nprices: { marketing-image: 0.009156 }\nsteps:\n  hero:\n    model: marketing-image\n    matrix: { n: [1, 2] }\n' +
          '    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }\n',
      );
      const out = join(dir, 'runs');
      const env = { GENPIPE_BASE_URL: emu.url };
      const first = await runCli(['run', path, '--out', out, '--quiet', '--yes'], { env });
      expect(first.code, first.stderr).toBe(0);
      const runDir = findRunDir(out, 'heroes');
      expect(emuRequests(emu)).toHaveLength(2);
      await new ReviewStore(runDir).apply({ instance: 'hero[n=1]', decision: 'rejected' });

      // The remake's intent reaches the disk, then the process dies before its POST.
      const crashed = await runCli(['resume', runDir, '--retry', 'rejected', '--quiet'], {
        env: { ...env, GENPIPE_CRASH_AT: 'after_intent_sync' },
      });
      expect(crashed.signal).toBe('SIGKILL');
      expect(emuRequests(emu)).toHaveLength(2);
      const records = journalOf(runDir).records;
      const retry = records.findIndex((r) => r.type === 'retry' && r.instance === 'hero[n=1]');
      expect(retry).toBeGreaterThan(-1);
      expect(records.slice(retry).filter((r) => r.type === 'intent' && r.instance === 'hero[n=1]')).toHaveLength(1);

      // A plain resume: the remake may or may not have reached the service, so it is not resent.
      const resumed = await runCli(['resume', runDir, '--quiet'], { env });
      expect(emuRequests(emu)).toHaveLength(2);
      expect(resumed.code).not.toBe(0);
      const total = (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: Total }).total;
      expect(total.counts).toMatchObject({ completed: 1, unknown: 1 });
      // Both images' first attempts charged; the remake's price apart, as unknown, never in the net.
      expect(total.netUsd).toBe(0.018312);
      expect(total.unknownUsd).toBe(0.009156);
      const charges = emu.ledger.entries.filter((e) => e.kind === 'charge');
      expect(charges).toHaveLength(2);
    });
  });
});
