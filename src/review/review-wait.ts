/**
 * The sentence a run ends with when a step of it waits on review: a `for_each: {step, only:
 * approved}` step starts only for the upstream instances approved in review.json, so a run whose
 * upstream is not reviewed yet ends "completed" with those instances not started. It says so, and
 * names the two commands that finish the work.
 */
import { readPlanFile, type PlanFile } from '../run/files/run-dir.js';
import { formatCount } from '../util/format-usd.js';
import { readReview } from './review-store.js';

/** Shell-safe enough for a path in a sentence: quoted when it holds anything but plain characters. */
const shellPath = (path: string): string => (/^[\w@%+=:,./-]+$/.test(path) ? path : `'${path.replace(/'/g, `'\\''`)}'`);

/**
 * `undefined` when no step waits; else, for example: "3 clips instance(s) wait on review: 3 of 3
 * sheets instance(s) are neither approved nor rejected (clips follows only approved sheets). Review
 * them with `genpipe review runs/x/1`, then `genpipe resume runs/x/1`."
 */
export async function reviewWaitSentence(runDir: string, plan?: Pick<PlanFile, 'steps'>): Promise<string | undefined> {
  const steps = (plan ?? (await readPlanFile(runDir))).steps;
  const waiting = steps.filter((s) => s.for_each_only === 'approved' && s.for_each !== null);
  if (waiting.length === 0) return undefined;
  // A damaged review.json (genpipe review refuses it, naming it) counts as no decision here: this sentence never fails a run's end.
  const review = await readReview(runDir).catch(() => ({}) as Awaited<ReturnType<typeof readReview>>);
  const decided = new Map<string, number>();
  for (const [id, entry] of Object.entries(review)) {
    if (entry.decision === undefined) continue;
    const step = id.includes('[') ? id.slice(0, id.indexOf('[')) : id;
    decided.set(step, (decided.get(step) ?? 0) + 1);
  }
  const parts: string[] = [];
  for (const step of waiting) {
    const upstream = steps.find((s) => s.id === step.for_each);
    if (!upstream || upstream.count === 0) continue;
    const unreviewed = Math.max(0, upstream.count - (decided.get(upstream.id) ?? 0));
    if (unreviewed === 0) continue;
    // Each upstream instance has the same number of downstream instances (its own axes' product).
    const perUpstream = step.count / upstream.count;
    parts.push(
      `${formatCount(unreviewed * perUpstream)} ${step.id} instance(s) wait on review: ${formatCount(unreviewed)} of ${formatCount(upstream.count)} ${upstream.id} instance(s) are neither approved nor rejected (${step.id} follows only approved ${upstream.id})`,
    );
  }
  if (parts.length === 0) return undefined;
  const dir = shellPath(runDir.replace(/\/+$/, ''));
  return `${parts.join('; ')}. Review them with \`genpipe review ${dir}\`, then \`genpipe resume ${dir}\`.`;
}
