/**
 * Makes a directory entry durable: after creating or renaming a file, its name lives in the
 * directory, and only an fsync of the directory makes it survive a power cut (ext4, xfs).
 */
import { open } from 'node:fs/promises';

/** Codes of platforms or filesystems that cannot fsync a directory; there is nothing more to do there. */
const UNSUPPORTED = new Set(['EISDIR', 'EPERM', 'EINVAL', 'ENOTSUP', 'EACCES']);

export async function syncDirectory(dir: string): Promise<void> {
  let handle;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch (error) {
    if (!UNSUPPORTED.has((error as NodeJS.ErrnoException).code ?? '')) throw error;
  } finally {
    await handle?.close();
  }
}
