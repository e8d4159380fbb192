/**
 * A remake started from a run's page: `genpipe resume RUN_DIR --retry rejected,failed,canceled,nsfw --yes`
 * as a detached child process, so it outlives a restart of the ui, with its output in
 * RUN_DIR/ui-remake.log. Refused while another process holds the pipeline's lock: the run is
 * running, or being resumed already. The page asked for confirmation with the estimate before
 * this is called (`--yes` says so to resume).
 */
import { spawn } from 'node:child_process';
import { appendFileSync, closeSync, openSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readPipelineLock } from '../run/lock/lock.js';
import type { RetryStatus } from '../run/run-options.js';

export const REMAKE_LOG = 'ui-remake.log';

/** bin/genpipe.js of this installation: two folders up from src/ui, dist/ui and dist/bundle alike. */
const BIN = fileURLToPath(new URL('../../bin/genpipe.js', import.meta.url));

/** What the page's buttons select: the rejected results, or the instances that ended without one. */
export type RemakeSelection = 'rejected' | 'failed';

/**
 * The `--retry` statuses a selection asks for. "failed" is every instance that ended without a
 * result and can be sent again safely: failed, canceled and nsfw, as the run's page counts them.
 * Unknown is left out: a keyless submit of unknown fate may have been paid, and resending it may pay
 * twice, so that stays a deliberate `genpipe resume --retry unknown`.
 */
export function retryStatusesOf(selection: readonly RemakeSelection[]): RetryStatus[] {
  const statuses: RetryStatus[] = [];
  if (selection.includes('rejected')) statuses.push('rejected');
  if (selection.includes('failed')) statuses.push('failed', 'canceled', 'nsfw');
  return statuses;
}

export type RemakeStart = { started: true; pid: number; log: string } | { started: false; why: string };

export interface RemakeOptions {
  env: NodeJS.ProcessEnv;
  connectionArgs: readonly string[];
  /** The program that runs bin/genpipe.js. Default: this Node. Tests name one that cannot run. */
  execPath?: string | undefined;
}

/**
 * The remakes this process started, by run directory, until their process exits: a second
 * confirmation (another tab) inside the child's start-up, before it holds the lock, is refused
 * here, not left to lose the lock and leave a "skipped: overlap" row. `starting`: not spawned yet.
 */
const remakes = new Map<string, number | 'starting'>();

export async function startRemake(dir: string, selection: readonly RemakeSelection[], options: RemakeOptions): Promise<RemakeStart> {
  const key = resolve(dir);
  const earlier = remakes.get(key);
  if (earlier !== undefined)
    return {
      started: false,
      why:
        earlier === 'starting'
          ? 'a remake of this run is starting already; wait for it to end before asking for another'
          : `a remake of this run started already (pid ${earlier}) and has not ended; wait for it to end before asking for another`,
    };
  remakes.set(key, 'starting');
  let started: RemakeStart | undefined;
  try {
    started = await spawnRemake(dir, selection, options, key);
    return started;
  } finally {
    if (!started?.started) remakes.delete(key);
  }
}

async function spawnRemake(dir: string, selection: readonly RemakeSelection[], options: RemakeOptions, key: string): Promise<RemakeStart> {
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
      options.execPath ?? process.execPath,
      [BIN, 'resume', dir, '--retry', retryStatusesOf(selection).join(','), '--yes', '--quiet', ...options.connectionArgs],
      {
        detached: true,
        stdio: ['ignore', fd, fd],
        env: options.env,
      },
    );
    child.unref();
    // A spawn that fails (EAGAIN, EMFILE, EACCES, ENOENT) says so as an 'error' event, later: with no
    // listener it would end the ui. It is written to the log, and the route answers that it did not start.
    const failed = await new Promise<Error | undefined>((settle) => {
      let spawned = false;
      child.once('spawn', () => {
        spawned = true;
        settle(undefined);
      });
      child.on('error', (error) => {
        appendRemakeLog(log, spawned ? `the remake's process: ${error.message}` : `the remake did not start: ${error.message}`);
        settle(error);
      });
    });
    if (failed !== undefined || child.pid === undefined)
      return { started: false, why: `the resume process did not start: ${failed?.message ?? 'no pid'}` };
    remakes.set(key, child.pid);
    child.once('exit', () => remakes.delete(key));
    return { started: true, pid: child.pid, log };
  } finally {
    closeSync(fd);
  }
}

/** One line in the remake's log; a log that cannot be written leaves the answer to say it. */
function appendRemakeLog(log: string, line: string): void {
  try {
    appendFileSync(log, `${new Date().toISOString()} ${line}\n`);
  } catch {
    // The route's answer says the remake did not start.
  }
}
