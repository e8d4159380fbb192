// The ui's watch tells its listeners (the pages' event streams) every change it finds, whoever
// asked for the look. A look for the runs list (`/api/runs`) or a run page opened on a run not yet
// seen moves what the next look compares with: a change found there and kept to itself would never
// reach a page that follows. Real runs against the in-process emulator; the watch's own timer is
// set far off, so only the asked looks find anything.
import { get } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { RunWatch, type RunChanges } from '../../src/ui/run-watch.js';
import { startUiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.05, log: () => {} });
}, 30_000);

afterAll(async () => {
  await emu?.close();
  cleanTemps();
});

const io = (): CliIO => ({
  out: () => {},
  write: async () => {},
  err: () => {},
  env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
  signal: new AbortController().signal,
});

async function run(out: string, name: string): Promise<void> {
  expect(await main(['run', sheetsManifest(tempDir(), 2, { name }), '--out', out, '--quiet'], io())).toBe(0);
}

/** A watch whose timer never looks within the test, and the changes its listener is told. */
function watched(out: string): { watch: RunWatch; told: RunChanges[]; stop: () => void } {
  const watch = new RunWatch([out], { intervalMs: 3_600_000 });
  const told: RunChanges[] = [];
  const unsubscribe = watch.subscribe((changes) => told.push(changes));
  return { watch, told, stop: () => (unsubscribe(), watch.close()) };
}

const pipelinesOf = (told: RunChanges[]): string[] => told.flatMap((c) => c.changed.map((r) => r.pipeline)).sort();

describe("the ui's watch", () => {
  it('tells its listeners what a look for the runs list found', async () => {
    const out = tempDir();
    await run(out, 'first');
    const { watch, told, stop } = watched(out);
    try {
      expect((await watch.runs()).map((r) => r.pipeline)).toEqual(['first']);
      expect(pipelinesOf(told)).toEqual(['first']);
      await run(out, 'second');
      expect((await watch.runs()).map((r) => r.pipeline).sort()).toEqual(['first', 'second']);
      expect(pipelinesOf(told)).toEqual(['first', 'second']);
      // Nothing changed since: nothing more is told.
      await watch.runs();
      expect(told).toHaveLength(2);
    } finally {
      stop();
    }
  }, 180_000);

  it('tells its listeners of a run first seen by its own page', async () => {
    const out = tempDir();
    await run(out, 'alone');
    const { watch, told, stop } = watched(out);
    try {
      const key = `0/alone/${(await new RunWatch([out]).runs())[0]!.runId}`;
      expect((await watch.run(key))?.pipeline).toBe('alone');
      expect(pipelinesOf(told)).toEqual(['alone']);
      // The list's next look finds it unchanged, and says nothing of it again.
      expect((await watch.runs()).map((r) => r.key)).toEqual([key]);
      expect(told).toHaveLength(1);
    } finally {
      stop();
    }
  }, 180_000);

  it('gives a new runs page its list first, and not again as a change', async () => {
    const out = tempDir();
    await run(out, 'listed');
    const ui = await startUiServer({ runDirs: [out], host: '127.0.0.1', port: 0 });
    try {
      // The ui's first look is this stream's: what it finds is the list, not a change before it.
      const text = await new Promise<string>((resolve, reject) => {
        let body = '';
        const request = get(`${ui.url}/api/events`, (res) => {
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (body += chunk));
        });
        setTimeout(() => (request.destroy(), resolve(body)), 1_500);
        request.on('error', reject);
      });
      expect(text.match(/^event: \w+/gm)).toEqual(['event: runs']);
      expect(text).toContain('"pipeline":"listed"');
    } finally {
      await ui.close();
    }
  }, 180_000);
});
