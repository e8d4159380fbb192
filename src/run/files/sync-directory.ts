/**
 * Makes a directory entry durable: after creating or renaming a file, its name lives in the
 * directory, and only an fsync of the directory makes it survive a power cut (ext4, xfs).
 *
 * Concurrent callers for one directory share syncs (group commit): a caller waits for the first
 * sync that *starts* after it asked, so its entry is covered, and a thousand downloads finishing at
 * once cost a handful of fsyncs instead of a thousand.
 */
import { open } from 'node:fs/promises';

/** Codes of platforms or filesystems that cannot fsync a directory; there is nothing more to do there. */
const UNSUPPORTED = new Set(['EISDIR', 'EPERM', 'EINVAL', 'ENOTSUP', 'EACCES']);

async function fsyncDirectory(dir: string): Promise<void> {
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

interface DirectoryQueue {
  /** The sync running now, if any. */
  running: Promise<void> | undefined;
  /** The sync that will start when the running one ends; every caller that arrives meanwhile joins it. */
  next: Promise<void> | undefined;
}

const queues = new Map<string, DirectoryQueue>();

export function syncDirectory(dir: string): Promise<void> {
  let queue = queues.get(dir);
  if (!queue) {
    queue = { running: undefined, next: undefined };
    queues.set(dir, queue);
  }
  const q = queue;
  if (!q.running) {
    q.running = fsyncDirectory(dir).finally(() => {
      q.running = undefined;
      if (!q.next) queues.delete(dir);
    });
    return q.running;
  }
  // A sync is under way, but it may have started before this caller's rename: wait for the next.
  q.next ??= q.running
    .catch(() => {})
    .then(() => {
      q.next = undefined;
      return syncDirectory(dir);
    });
  return q.next;
}
