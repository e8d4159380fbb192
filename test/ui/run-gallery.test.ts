// A running run's gallery in `genpipe ui`, against the real ui server and the in-process emulator
// (its latency slowed, one instance at a time): the gallery's page asked while some instances have
// finished has those cells; asked again once more have finished, it has those too, and so do its
// data files. A data file asked in between, with no new page, is still of the page it was built
// with (its signature is that page's). No page follows the run's events meanwhile, so the ui's
// watch does not look at the run: the gallery sees the journal itself.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { replayFile } from '../../src/run/journal/run-state.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

const TOKEN = 'g'.repeat(43);
const COUNT = 4;
let emu: Emulator;
let server: UiServer | undefined;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.1, log: () => {} });
}, 30_000);

afterAll(async () => {
  await server?.close();
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

function ask(path: string): Promise<{ status: number; body: string }> {
  const url = new URL(path, server!.url);
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { 'x-genpipe-token': TOKEN } });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end();
  });
}

interface PageRef {
  file: string;
  sig: string;
  count: number;
}

/** The gallery page's index: its one step's data files. */
async function galleryPage(base: string): Promise<PageRef[]> {
  const page = await ask(`${base}gallery/`);
  expect(page.status).toBe(200);
  const json = /<script type="application\/json" id="gallery-data">([\s\S]*?)<\/script>/.exec(page.body)?.[1];
  const data = JSON.parse(json ?? 'null') as { steps: { id: string; pages: PageRef[] }[] };
  expect(data.steps.map((s) => s.id)).toEqual(['sheets']);
  return data.steps[0]!.pages;
}

/** A data file's signature and the ids of its completed cells. */
async function dataFile(base: string, ref: PageRef): Promise<{ sig: string; completed: string[] }> {
  const file = await ask(`${base}gallery/${ref.file}`);
  expect(file.status).toBe(200);
  const match = /^window\.__genpipeCells\(\d+,\d+,("[^"]*"),([\s\S]*)\);\n$/.exec(file.body);
  expect(match).not.toBeNull();
  const cells = JSON.parse(match![2]!) as { id: string; status: string }[];
  return {
    sig: JSON.parse(match![1]!) as string,
    completed: cells
      .filter((c) => c.status === 'completed')
      .map((c) => c.id)
      .sort(),
  };
}

async function completedInJournal(runDir: string): Promise<string[]> {
  const state = await replayFile(join(runDir, 'journal.jsonl')).catch(() => undefined);
  return [...(state?.instances ?? [])]
    .filter(([, entry]) => entry.final?.status === 'completed')
    .map(([id]) => id)
    .sort();
}

describe("a running run's gallery in the ui", () => {
  it('shows the cells finished since it was first asked, on a reload', async () => {
    const out = tempDir();
    server = await startUiServer({ runDirs: [out], host: '127.0.0.1', port: 0, token: TOKEN });
    const finished = main(
      ['run', sheetsManifest(tempDir(), COUNT, { name: 'growing' }), '--out', out, '--quiet', '--concurrency', '1'],
      io(),
    );
    let runDir = '';
    await expect
      .poll(
        async () => {
          const ids = existsSync(join(out, 'growing')) ? readdirSync(join(out, 'growing')).filter((n) => !n.startsWith('.')) : [];
          if (ids[0] !== undefined) runDir = join(out, 'growing', ids[0]);
          return runDir === '' ? 0 : (await completedInJournal(runDir)).length;
        },
        { timeout: 60_000, interval: 50 },
      )
      .toBeGreaterThan(0);
    const runs = JSON.parse((await ask('/api/runs')).body) as UiRun[];
    const run = runs.find((r) => r.dir === runDir)!;
    expect(run.running).toBe(true);
    const base = `/run/${run.key}/`;

    const firstPage = await galleryPage(base);
    expect(firstPage).toHaveLength(1);
    const first = await dataFile(base, firstPage[0]!);
    expect(first.sig).toBe(firstPage[0]!.sig);
    expect(first.completed.length).toBeGreaterThan(0);
    expect(first.completed.length).toBeLessThan(COUNT);

    expect(await finished).toBe(0);
    const all = await completedInJournal(runDir);
    expect(all).toHaveLength(COUNT);
    // Its data file, asked again without the page, is still the one of the page it was built with.
    expect(await dataFile(base, firstPage[0]!)).toEqual(first);

    // The page asked again: built anew, with every cell finished since.
    const secondPage = await galleryPage(base);
    expect(secondPage[0]!.sig).not.toBe(firstPage[0]!.sig);
    const second = await dataFile(base, secondPage[0]!);
    expect(second).toEqual({ sig: secondPage[0]!.sig, completed: all });
    // And built once: the same page again is the same build.
    expect(await galleryPage(base)).toEqual(secondPage);
  }, 120_000);
});
