/**
 * `--retry rejected`: a completed result the reviewer rejected is made again. A seeded model is
 * re-rolled, as an nsfw result is, with a seed outside the sweep (journaled as a `reroll`); a model
 * without a seed is sent again as a new attempt (journaled as a `retry`: a new key where the model
 * has keys, and for a keyless one an intent journaled before its POST, so a crash in between leaves
 * it unknown, never paid twice). Its files move first to `outputs/<step>/rejected/<attempt>/`, kept
 * and out of the new attempt's way. An agent turn is kept as it is, with a line saying why.
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
  // Remade for this very decision already: a remake whose bytes came out the same is not remade again.
  if (judged !== undefined && entry.remadeJudged === judged) return false;
  return judged === undefined ? entry.retryRound !== round : judged === outputsDigest(entry);
}

/** Sets the rejected files aside and names the remake's seed: remade, or kept when the model takes no seed. */
export async function remakeRejected(
  fx: RunEffects,
  seeds: RerollSeeds,
  step: StepPlan,
  planned: PlannedInstance,
  entry: InstanceState,
  conversational: boolean,
): Promise<FateOf<'remade'> | FateOf<'kept'>> {
  if (conversational)
    return {
      kind: 'kept',
      reason:
        'rejected in review, but an agent turn cannot be made again without its whole conversation, so it is kept as it was and nothing was sent',
    };
  const attempt = entry.rerolls + entry.retries + 1;
  const seed = seeds.next(step, planned, entry.rerolls + 1);
  // Set aside under the attempt being replaced, so a second remake never meets the first one's files.
  for (const download of entry.downloads?.values() ?? []) await setAside(fx.settings.runDir, download.path, attempt - 1);
  const round = fx.recorded.retryRound;
  if (seed !== undefined) return { kind: 'remade', attempt: entry.rerolls + 1, seed, round };
  return { kind: 'remade', attempt, retry: entry.retries + 1, round, judged: outputsDigest(entry) };
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
