// An image's size is journaled as it is downloaded (`downloaded` width and height, from its first
// bytes), so `genpipe report` rebuilds the gallery without opening each image to learn it: an
// image the journal says fits in 512 px gets no thumbnail, whatever the file on disk is now. A
// real run against the emulator on 127.0.0.1, in this process.
import { existsSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { thumbPathOf } from '../../src/gallery/gallery-data.js';
import { runInProcess } from '../cli/in-process.js';
import { cleanTemps, findRunDir, journalOf, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

describe('image sizes in the journal', () => {
  it('are journaled at download, and genpipe report trusts them instead of opening each image', { timeout: 60_000 }, async () => {
    const env = { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` };
    const out = tempDir();
    const ran = await runInProcess(['run', sheetsManifest(tempDir(), 2, { name: 'sizes' }), '--out', out, '--quiet', '--yes'], env);
    expect(ran.code, ran.err).toBe(0);
    const runDir = findRunDir(out, 'sizes');
    const downloaded = journalOf(runDir).records.filter((r) => r.type === 'downloaded');
    expect(downloaded.length).toBeGreaterThan(0);
    for (const d of downloaded) {
      if (d.type !== 'downloaded') continue;
      const real = await sharp(join(runDir, d.path)).metadata();
      expect({ width: d.width, height: d.height }, d.path).toEqual({ width: real.width, height: real.height });
    }

    // One output replaced by an image larger than 512 px: the journal, which says it fits, decides.
    const first = downloaded[0]!;
    if (first.type !== 'downloaded') return;
    await sharp({ create: { width: 1536, height: 1024, channels: 3, background: { r: 10, g: 20, b: 30 } } })
      .png()
      .toFile(join(runDir, `${first.path}.big`));
    renameSync(join(runDir, `${first.path}.big`), join(runDir, first.path));
    const report = await runInProcess(['report', runDir], env);
    expect(report.code, report.err).toBe(0);
    expect(existsSync(join(runDir, thumbPathOf(first.path)))).toBe(false);
  });
});
