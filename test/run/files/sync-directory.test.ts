import { mkdtempSync } from 'node:fs';
import * as fsPromises from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';

describe('syncDirectory', () => {
  it('resolves each caller only after a sync that started after it asked, sharing syncs between callers', async () => {
    const opened: string[] = [];
    const realOpen = fsPromises.open;
    vi.resetModules();
    vi.doMock('node:fs/promises', () => ({
      ...fsPromises,
      open: async (...args: Parameters<typeof realOpen>) => {
        opened.push(String(args[0]));
        return realOpen(...args);
      },
    }));
    const { syncDirectory } = await import('../../../src/run/files/sync-directory.js');
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-dirsync-'));
    // One sync starts at once; the 99 callers that arrive while it runs share exactly one more.
    const first = syncDirectory(dir);
    const rest = Array.from({ length: 99 }, () => syncDirectory(dir));
    await Promise.all([first, ...rest]);
    expect(opened.filter((p) => p === dir)).toHaveLength(2);
    // Later callers get a sync of their own.
    await syncDirectory(dir);
    expect(opened.filter((p) => p === dir)).toHaveLength(3);
    vi.doUnmock('node:fs/promises');
  });
});
