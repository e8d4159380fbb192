// Agent steps save the answer as outputs/<step>/<id>.md and download the
// media the agent generated, with a download's guarantees: journaled, in outputs.csv, and a resume
// that finds the file already written (a crash before its record) takes it without sending again.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, emuRequests, filesUnder, findRunDir, HF_KEY, journalOf, sha256File, tempDir } from './runner-helpers.js';

const io = (env: NodeJS.ProcessEnv, stderr: string[] = []): CliIO => ({
  out: () => {},
  write: async () => {},
  err: (t) => stderr.push(t),
  env,
  signal: new AbortController().signal,
});

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

function agentManifest(content: string): string {
  const path = join(tempDir(), 'notes.yaml');
  writeFileSync(
    path,
    `version: 1\nname: notes\nsteps:\n  chat:\n    model: agent\n    matrix:\n      topic: [frogs]\n    input:\n      content: ${JSON.stringify(content)}\n`,
  );
  return path;
}

describe('agent outputs', () => {
  it(
    'a turn that generates a sheet leaves the answer as .md and the image beside it, both in outputs.csv',
    { timeout: 30_000 },
    async () => {
      const out = tempDir();
      const stderr: string[] = [];
      expect(
        await main(
          ['run', agentManifest('Generate a character sheet of a frog'), '--out', out, '--quiet'],
          io({ GENPIPE_BASE_URL: emu.url, HF_KEY }, stderr),
        ),
        stderr.join('\n'),
      ).toBe(0);
      const runDir = findRunDir(out, 'notes');
      const files = filesUnder(join(runDir, 'outputs')).sort();
      expect(files).toHaveLength(2);
      expect(files[0]).toMatch(/^chat\/chat_topic=frogs-[0-9a-f]{12}\.md$/);
      expect(files[1]).toBe(files[0]?.replace(/\.md$/, '.png'));
      const md = filesUnder(join(runDir, 'outputs')).find((f) => f.endsWith('.md')) as string;
      const answer = readFileSync(join(runDir, 'outputs', md), 'utf8');
      expect(answer).toMatch(/^Here is your character sheet: http:\/\/127\.0\.0\.1:\d+\/.+\n$/);
      const final = journalOf(runDir).records.find((r) => r.type === 'status' && 'result' in r) as
        { result?: { answer?: string } } | undefined;
      expect(`${final?.result?.answer}\n`).toBe(answer);
      const csv = readFileSync(join(runDir, 'outputs.csv'), 'utf8');
      expect(csv).toContain(`outputs/${md},${sha256File(join(runDir, 'outputs', md))}`);
      expect(csv).toMatch(/outputs\/chat\/[^,]+\.png,[0-9a-f]{64}/);
    },
  );

  it('a text answer is saved alone; a resume after a crash before its record takes the file as written', { timeout: 30_000 }, async () => {
    const out = tempDir();
    const env = { GENPIPE_BASE_URL: emu.url, HF_KEY };
    expect(await main(['run', agentManifest('Tell me about frogs'), '--out', out, '--quiet'], io(env))).toBe(0);
    const runDir = findRunDir(out, 'notes');
    const [md] = filesUnder(join(runDir, 'outputs'));
    expect(md).toMatch(/\.md$/);
    const before = readFileSync(join(runDir, 'outputs', md as string));
    // The crash: the file is in place, its `downloaded` record is not.
    const journal = join(runDir, 'journal.jsonl');
    const lines = readFileSync(journal, 'utf8').split('\n');
    const at = lines.findIndex((l) => l.includes('"type":"downloaded"'));
    expect(at).toBeGreaterThan(0);
    writeFileSync(journal, [...lines.slice(0, at), ...lines.slice(at + 1)].join('\n'));
    const sent = emuRequests(emu).length;
    const stderr: string[] = [];
    expect(await main(['resume', runDir, '--quiet'], io(env, stderr)), stderr.join('\n')).toBe(0);
    expect(readFileSync(join(runDir, 'outputs', md as string))).toEqual(before);
    expect(journalOf(runDir).records.filter((r) => r.type === 'downloaded')).toHaveLength(1);
    expect(emuRequests(emu)).toHaveLength(sent);
  });
});
