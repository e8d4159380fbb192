// Torn journal (reliability.md #2): the last record of a run's journal is cut at every byte offset,
// and a resume reaches the same final state: the same request id, status, file and sha256 per
// instance, and no new request at the emulator. In-process (runPlan, fast polling), because one
// resume per byte offset through a child process would take minutes; the CLI path is the same
// runPlan call (see runner-crash-resume.test.ts for resumes through the built CLI).
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';
import { parseJournal } from '../../src/run/journal/journal.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { runPlan } from '../../src/run/runner.js';
import {
  cleanTemps,
  emuRequests,
  expectOneRequestPerKey,
  HF_KEY,
  inBatches,
  sha256File,
  sheetsManifest,
  tempDir,
} from './runner-helpers.js';

const INSTANCES = 4;
let emu: Emulator;
let client: GenerationClient;
let plan: Plan;
let hash: string;
let reference: { runDir: string; runId: string; lines: Buffer[]; state: string };

/** instance → request id, status, path and sha256, from the journal (and the files, checked). */
function finalState(runDir: string): string {
  const { records, corrupt } = parseJournal(readFileSync(join(runDir, 'journal.jsonl')));
  expect(corrupt).toEqual([]);
  const state = new Map<string, { requestId?: string; status?: string; path?: string; sha256?: string }>();
  const of = (id: string) => state.get(id) ?? (state.set(id, {}), state.get(id)!);
  for (const r of records) {
    if (r.type === 'submitted' && r.handle.kind === 'request') of(r.instance).requestId = r.handle.requestId;
    if (r.type === 'status') of(r.instance).status = r.status;
    if (r.type === 'downloaded') {
      expect(sha256File(join(runDir, r.path))).toBe(r.sha256);
      Object.assign(of(r.instance), { path: r.path, sha256: r.sha256 });
    }
  }
  return JSON.stringify([...state].sort(([a], [b]) => a.localeCompare(b)));
}

async function resume(runDir: string, runId: string): Promise<void> {
  const summary = await runPlan({
    plan,
    client,
    runDir,
    runId,
    planHash: hash,
    signal: new AbortController().signal,
    concurrency: INSTANCES,
    ratePerSecond: 10_000,
    poll: { floorMs: 1, baseMs: 2, capMs: 20 },
  });
  expect(summary.outcome).toBe('completed');
  expect(summary.counts.completed).toBe(INSTANCES);
}

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.001, seed: 21, log: () => {} });
  client = new GenerationClient(resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY } }));
  const manifest = sheetsManifest(tempDir(), INSTANCES, { name: 'torn' });
  plan = await buildPlan(loadManifestFile(manifest));
  hash = planHash(plan);
  const { runId, dir } = await createRunDir(tempDir(), plan, manifest, hash);
  await resume(dir, runId);
  const data = readFileSync(join(dir, 'journal.jsonl'));
  const lines: Buffer[] = [];
  for (let start = 0; start < data.length;) {
    const end = data.indexOf(0x0a, start);
    lines.push(data.subarray(start, end + 1));
    start = end + 1;
  }
  reference = { runDir: dir, runId, lines, state: finalState(dir) };
}, 60_000);

// Removing the thousand-odd copied run directories takes seconds on a busy machine: a minute's bound.
afterAll(async () => {
  await client?.close();
  await emu?.close();
  cleanTemps();
}, 60_000);

/** The index of the last line whose record has this type. */
function lastOfType(type: string): number {
  for (let i = reference.lines.length - 1; i >= 0; i--) if (reference.lines[i]?.toString('utf8').includes(`"type":"${type}"`)) return i;
  throw new Error(`no ${type} record`);
}

describe('a torn last journal record', () => {
  // The last record of a journal cut right after a submit's answer, after a download, and of a
  // finished run. Every byte offset of each (0 = the record is gone; its full length = intact).
  it.each(['intent', 'submitted', 'status', 'downloaded', 'run_finished'])(
    'cut after a %s record, at every byte offset, resumes to the same final state',
    { timeout: 120_000 },
    async (type) => {
      const target = lastOfType(type);
      const prefix = Buffer.concat(reference.lines.slice(0, target));
      const line = reference.lines[target] as Buffer;
      const offsets = Array.from({ length: line.length + 1 }, (_, k) => k);
      const before = emuRequests(emu).length;
      await inBatches(offsets, 4, async (k) => {
        const dir = join(tempDir('genpipe-torn-'), 'run');
        cpSync(reference.runDir, dir, { recursive: true });
        writeFileSync(join(dir, 'journal.jsonl'), Buffer.concat([prefix, line.subarray(0, k)]));
        await resume(dir, reference.runId);
        expect(finalState(dir), `cut at byte ${k} of ${line.length}`).toBe(reference.state);
        const journal = parseJournal(readFileSync(join(dir, 'journal.jsonl')));
        expect(journal.tornTail).toBe(false);
      });
      // No resume created a request: resubmits carried the same Idempotency-Key.
      expect(emuRequests(emu)).toHaveLength(before);
      expect(expectOneRequestPerKey(emu).size).toBe(INSTANCES);
      expect(offsets.length).toBeGreaterThan(50);
    },
  );
});
