/**
 * Legacy platform models (§4.7): DoP, Soul and Speak create job sets (§2.7), tracked through
 * `GET /v1/job-sets/{id}` (beyond the spec; see the README). The instance ends when every job has;
 * it completes when every job completed, and otherwise takes the worst job status.
 */
import { FINAL_JOB_STATUSES, type JobSet } from '../api/wire.js';
import type { AdapterContext, FinalStatus, ModelAdapter, OutputRef, TrackResult } from './adapter.js';
import { acceptFor } from './adapter.js';
import { checkJobSetFollow, sentBodyOf } from './follow-check.js';

const SEVERITY: Record<string, number> = { completed: 0, canceled: 1, nsfw: 2, failed: 3 };

/**
 * `type`: the job-set type the model's sets have (§2.7), checked on every answer when given. The
 * body sent, when the caller passes it (`sentBody`, follow-check.ts), is checked against the
 * answer's input_params.
 */
export function jobSetAdapter(
  submit: (body: unknown, ctx: AdapterContext) => Promise<JobSet>,
  expected: { type?: string } = {},
): ModelAdapter {
  return {
    idempotentSubmit: false,
    async submit(body, _options, ctx) {
      const set = await submit(body, ctx);
      return { kind: 'job_set', jobSetId: set.id };
    },
    adopt: (jobSetId) => ({ kind: 'job_set', jobSetId }),
    async track(submission, _script, ctx): Promise<TrackResult> {
      if (submission.kind !== 'job_set') throw new Error(`a job-set adapter cannot track a ${submission.kind}`);
      const set = await ctx.client.legacy.jobSet(submission.jobSetId, { signal: ctx.signal });
      // An answer about another job set (ids handed out again, a confused gateway) is never taken as this one's.
      checkJobSetFollow(submission.jobSetId, set, { type: expected.type, sentParams: sentBodyOf(ctx) });
      if (set.jobs.length > 0 && !set.jobs.every((j) => FINAL_JOB_STATUSES.has(j.status))) return { done: false };
      const worst = set.jobs.reduce<string>((acc, j) => ((SEVERITY[j.status] ?? 3) > (SEVERITY[acc] ?? 0) ? j.status : acc), 'completed');
      const status = (worst in SEVERITY ? worst : 'failed') as FinalStatus;
      const files: OutputRef[] = [];
      if (status === 'completed') {
        set.jobs.forEach((job, i) => {
          const raw = job.results?.raw;
          const min = job.results?.min;
          if (raw) files.push({ url: raw.url, name: `job-${i}-raw`, accept: acceptFor(raw.type) });
          if (min) files.push({ url: min.url, name: `job-${i}-min`, accept: acceptFor(min.type) });
        });
      }
      const error = set.jobs.map((j) => (j as { error?: unknown }).error).find((e): e is string => typeof e === 'string');
      return { done: true, status, files, outputs: { job_set_id: set.id, jobs: set.jobs }, error };
    },
  };
}
