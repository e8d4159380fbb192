/**
 * A remake started from a run's page: `genpipe resume RUN_DIR --retry rejected,failed --yes` as a
 * detached child process, so it outlives a restart of the ui, with its output in
 * RUN_DIR/ui-remake.log. Refused while another process holds the pipeline's lock: the run is
 * running, or being resumed already. The page asked for confirmation with the estimate before
 * this is called (`--yes` says so to resume).
 */
import { spawn } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readPipelineLock } from '../run/lock/lock.js';

export const REMAKE_LOG = 'ui-remake.log';

/** bin/genpipe.js of this installation: two folders up from src/ui, dist/ui and dist/bundle alike. */
const BIN = fileURLToPath(new URL('../../bin/genpipe.js', import.meta.url));

export type RemakeStart = { started: true; pid: number; log: string } | { started: false; why: string };

export async function startRemake(
  dir: string,
  selection: readonly string[],
  options: { env: NodeJS.ProcessEnv; connectionArgs: readonly string[] },
): Promise<RemakeStart> {
  const lock = await readPipelineLock(join(dirname(dir), '.lock'));
  if (lock.state === 'held')
    return {
      started: false,
      why: lock.owner
        ? `another process holds the lock of this pipeline: run ${lock.owner.runId}, pid ${lock.owner.pid} on ${lock.owner.host}`
        : 'another process holds the lock of this pipeline',
    };
  const log = join(dir, REMAKE_LOG);
  const fd = openSync(log, 'a', 0o600);
  try {
    const child = spawn(
      process.execPath,
      [BIN, 'resume', dir, '--retry', selection.join(','), '--yes', '--quiet', ...options.connectionArgs],
      {
        detached: true,
        stdio: ['ignore', fd, fd],
        env: options.env,
      },
    );
    child.unref();
    const pid = child.pid;
    if (pid === undefined) return { started: false, why: 'the resume process did not start' };
    return { started: true, pid, log };
  } finally {
    closeSync(fd);
  }
}
