/**
 * `--retry rejected`: a completed result the reviewer rejected is made again, as an nsfw re-roll
 * is, with a seed outside the sweep (journaled as a `reroll`). Its files move first to
 * `outputs/<step>/rejected/<attempt>/`, kept and out of the new attempt's way. A model without a
 * seed is kept as it is, with a line saying so.
 */
import { link, mkdir, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import { resolveInside } from '../files/output-names.js';
import { outputsDigest, type InstanceState } from '../journal/run-state.js';
import type { RunEffects } from '../run-context.js';
import type { FateOf } from './fate.js';
import type { RerollSeeds } from './reroll-seeds.js';

/**
 * True when the review rejected the output the instance has now: a decision binds to the output
 * it judged (`judged`, the digest of review.json), so a remade instance is not remade again by a
 * repeat. A decision recorded without its output (older genpipe, or written by hand) remakes
 * once per `--retry rejected` round.
 */
export function rejectsCurrent(
  rejected: ReadonlyMap<string, string | undefined>,
  id: string,
  entry: InstanceState,
  round: number | undefined,
): boolean {
  if (!rejected.has(id)) return false;
  const judged = rejected.get(id);
  return judged === undefined ? entry.retryRound !== round : judged === outputsDigest(entry);
}

/** Sets the rejected files aside and names the remake's seed: remade, or kept when the model takes no seed. */
export async function remakeRejected(
  fx: RunEffects,
  seeds: RerollSeeds,
  step: StepPlan,
  planned: PlannedInstance,
  entry: InstanceState,
): Promise<FateOf<'remade'> | FateOf<'kept'>> {
  const attempt = entry.rerolls + 1;
  const seed = seeds.next(step, planned, attempt);
  if (seed === undefined)
    return { kind: 'kept', reason: `rejected in review, but ${step.model} takes no seed to make it differently; it is kept as it was` };
  for (const download of entry.downloads?.values() ?? []) await setAside(fx.options.runDir, download.path, entry.rerolls);
  return { kind: 'remade', attempt, seed, round: fx.recorded.retryRound };
}

/**
 * Moves a rejected output to `outputs/<step>/rejected/<attempt>/` (linked there, then unlinked),
 * replacing nothing; a file a crash left at both places (linked, not yet unlinked) is finished, and
 * one already moved is not an error.
 */
async function setAside(runDir: string, path: string, attempt: number): Promise<void> {
  const from = resolveInside(runDir, path);
  const to = join(dirname(from), 'rejected', String(attempt), basename(from));
  await mkdir(dirname(to), { recursive: true });
  try {
    await link(from, to);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EEXIST') throw error;
    const [a, b] = await Promise.all([stat(from), stat(to)]);
    if (a.ino !== b.ino || a.dev !== b.dev) throw new GenpipeError('invalid_file', `Cannot set ${path} aside: ${to} is another file.`);
  }
  await unlink(from);
}
