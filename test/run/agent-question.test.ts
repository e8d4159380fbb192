// An agent's clarifying question parks the turn (service spec §3.2: processing → awaiting_input, the
// assistant message holds the question) without ending it: genpipe answers from the step's replies
// and keeps following the same turn. The spec does not say which status the question message
// carries; the emulator serves both readings, and genpipe must not stop at either.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { CLARIFYING_QUESTION, startEmulator } from '../../src/emulator/index.js';
import { cleanTemps, filesUnder, findRunDir, HF_KEY, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

const io = (env: NodeJS.ProcessEnv, stderr: string[]): CliIO => ({
  out: () => {},
  write: async () => {},
  err: (t) => stderr.push(t),
  env,
  signal: new AbortController().signal,
});

function manifest(replies: string[] | undefined): string {
  const path = join(tempDir(), 'ask.yaml');
  writeFileSync(
    path,
    `version: 1
name: ask
steps:
  chat:
    model: agent
    matrix:
      n: [1]
    input:
      content: "please make something for the launch"
${replies ? `    replies: ${JSON.stringify(replies)}\n` : ''}`,
  );
  return path;
}

describe.each(['completed', 'processing'] as const)('a question whose message is %s', (questionStatus) => {
  it('parks the turn: genpipe replies, follows the same turn to its sheet, and pays one reserve', { timeout: 60_000 }, async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {}, agent: { questionStatus } });
    try {
      const out = tempDir();
      const stderr: string[] = [];
      const code = await main(['run', manifest(['character']), '--out', out, '--quiet'], io({ GENPIPE_BASE_URL: emu.url, HF_KEY }, stderr));
      expect(code, stderr.join('\n')).toBe(0);
      const runDir = findRunDir(out, 'ask');
      const files = filesUnder(join(runDir, 'outputs'));
      expect(files.filter((f) => f.endsWith('.png'))).toHaveLength(1);
      const [session] = [...emu.agent.sessions.values()];
      const texts = session?.messages.map((m) => (m.role === 'user' ? (m.message as { text: string }).text : m.status)) ?? [];
      // The opening message, the question, the reply, the answer: one turn, resumed.
      expect(texts).toEqual(['please make something for the launch', 'completed', 'character', 'completed']);
      expect(emu.ledger.entries.filter((e) => e.kind === 'reserve')).toHaveLength(1);
    } finally {
      await emu.close();
    }
  });

  it('with no reply left, the instance fails with the question, and the turn is left parked, not ended', { timeout: 60_000 }, async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {}, agent: { questionStatus } });
    try {
      const out = tempDir();
      const stderr: string[] = [];
      const code = await main(['run', manifest(undefined), '--out', out], io({ GENPIPE_BASE_URL: emu.url, HF_KEY }, stderr));
      expect(code).toBe(1);
      expect(stderr.join('\n')).toContain(CLARIFYING_QUESTION);
      const [session] = [...emu.agent.sessions.values()];
      expect(session?.status).toBe('awaiting_input');
      expect(emu.requests.byId.size).toBe(0);
    } finally {
      await emu.close();
    }
  });
});
