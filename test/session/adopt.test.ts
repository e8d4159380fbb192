// A request the service took (and charged) whose answer the journal could not record is never
// hidden: the run ends on the full disk (exit 6) with one stderr line naming the instance, the
// request id and the body's hash, and `genpipe resume RUN_DIR --adopt INSTANCE=ID` with exactly
// that pair follows the request to its files without a second POST, its money charged once
// (report = ledger). Pairs that cannot be adopted are refused with one sentence, exit 2, nothing
// sent. The full disk is an injected writer (fail-submitted-write.mjs): the journal's writes fail
// with ENOSPC from the `submitted` record on, right after the POST, which no tmpfs can aim at
// (a write into a journal page already allocated succeeds on a full tmpfs).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  findRunDir,
  journalOf,
  marketingManifest,
  runCli,
  spentUsd,
  tempDir,
} from '../run/runner-helpers.js';

/** US$ the emulator charges for one low-quality 1k marketing image. */
const PRICE = 0.008925;
const FAILING_WRITER = new URL('./fail-submitted-write.mjs', import.meta.url).pathname;

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

/** The pair `--adopt` takes, from the stderr line of a request the journal could not record. */
function printedPair(stderr: string): { line: string; pair: string } {
  const line = stderr.split('\n').find((l) => l.includes('the journal could not record it')) ?? '';
  const match = /--adopt (?:'([^']+)'|(\S+))$/.exec(line);
  return { line, pair: match?.[1] ?? match?.[2] ?? '' };
}

describe('a request id received but not journaled', () => {
  it(
    'is printed on stderr with its body hash, and resume --adopt follows it with no second POST: report = ledger',
    { timeout: 120_000 },
    async () => {
      const env = { GENPIPE_BASE_URL: emu.url };
      const out = tempDir();
      const manifest = marketingManifest(tempDir(), 1, 'adopted');
      // Priced as the service charges it, so the report's net can be held to the ledger.
      writeFileSync(manifest, readFileSync(manifest, 'utf8').replace('steps:', `prices: { marketing-image: ${PRICE} }\nsteps:`));
      const before = emuRequests(emu).length;
      const spentBefore = spentUsd(emu);
      const full = await runCli(['run', manifest, '--out', out, '--quiet'], {
        env: { ...env, NODE_OPTIONS: `--import=${FAILING_WRITER}` },
        timeoutMs: 60_000,
      });
      expect(full.code, full.stderr).toBe(6);
      expect(full.stderr).not.toMatch(/internal error|a bug in genpipe|\n\s+at /);
      const sent = emuRequests(emu).slice(before);
      expect(sent).toHaveLength(1);
      const request = sent[0]!;
      const runDir = findRunDir(out, 'adopted');
      // The journal has the intent and no answer: left alone, a resume could only call it unknown.
      const journaled = journalOf(runDir).records;
      const intent = journaled.find((r) => r.type === 'intent');
      expect(intent).toBeDefined();
      expect(journaled.some((r) => r.type === 'submitted')).toBe(false);
      // One line: the instance, the request id, the body hash and the command that recovers it.
      const { line, pair } = printedPair(full.stderr);
      expect(line).toContain(`request ${request.request_id} `);
      expect(line).toContain(`body sha256 ${intent?.type === 'intent' ? intent.bodyHash : '?'}`);
      expect(line.startsWith(`genpipe: ${intent?.instance}: `)).toBe(true);
      expect(line).toContain(`genpipe resume ${runDir} --adopt `);
      expect(pair).toBe(`${intent?.instance}=${request.request_id}`);

      // Refused, each with one sentence, exit 2, nothing sent and nothing written.
      const journalBytes = readFileSync(join(runDir, 'journal.jsonl'));
      for (const [adopt, said] of [
        ['ads', /^genpipe: --adopt takes INSTANCE=REQUEST_ID, as the run printed it/],
        [
          `ads[n=7]=${request.request_id}`,
          /^genpipe: --adopt ads\[n=7\]=\S+ is refused: the run's plan has no instance of that id\. Nothing was sent\.\n$/,
        ],
        [`${pair} --adopt ${pair}`, /is refused: the instance is named twice/],
      ] as const) {
        const refused = await runCli(['resume', runDir, ...adopt.split(' --adopt ').flatMap((p) => ['--adopt', p])], { env });
        expect(refused.code, refused.stderr).toBe(2);
        expect(refused.stderr).toMatch(said);
        expect(refused.stderr.trim().split('\n')).toHaveLength(1);
      }
      const notResumed = await runCli(['run', manifest, '--out', out, '--adopt', pair], { env });
      expect(notResumed.code).toBe(2);
      expect(notResumed.stderr).toMatch(/--adopt follows a request of an earlier start: use it with genpipe resume RUN_DIR\./);
      expect(readFileSync(join(runDir, 'journal.jsonl')).equals(journalBytes)).toBe(true);
      expect(emuRequests(emu).length).toBe(before + 1);

      // The printed pair: followed and downloaded, not sent again.
      const adopted = await runCli(['resume', runDir, '--adopt', pair], { env, timeoutMs: 60_000 });
      expect(adopted.code, adopted.stderr).toBe(0);
      expect(emuRequests(emu).length).toBe(before + 1);
      expectCompletedRun(runDir, emu, 1, 'ads');
      const submitted = journalOf(runDir).records.filter((r) => r.type === 'submitted');
      expect(submitted).toEqual([expect.objectContaining({ instance: intent?.instance, adopted: true })]);
      // Charged once: the report's net is what the service's ledger took, with nothing unknown.
      const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; unknownUsd: number } };
      expect(report.total.unknownUsd).toBe(0);
      expect(report.total.netUsd).toBeCloseTo(spentUsd(emu) - spentBefore, 6);
      expect(report.total.netUsd).toBeCloseTo(PRICE, 6);

      // Adopted once: the same pair again is refused, the instance being completed.
      const again = await runCli(['resume', runDir, '--adopt', pair], { env });
      expect(again.code).toBe(2);
      expect(again.stderr).toMatch(/is refused: the instance already ended completed\. Nothing was sent\.\n$/);
      expect(emuRequests(emu).length).toBe(before + 1);
    },
  );
});
