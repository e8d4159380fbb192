/**
 * Models that return a request id and are tracked through request status (§4.1): character sheet,
 * marketing image, Soul standard (and raw endpoint paths). Each status answer must be about the
 * request followed (follow-check.ts).
 */
import { isFinalStatus, type SubmitResponse } from '../api/wire.js';
import type { AdapterContext, FinalStatus, ModelAdapter, Submission, TrackResult } from './adapter.js';
import { filesOfStatus } from './adapter.js';
import { checkRequestFollow } from './follow-check.js';

export function requestAdapter(options: {
  idempotentSubmit: boolean;
  submit(body: unknown, idempotencyKey: string | undefined, ctx: AdapterContext): Promise<SubmitResponse>;
}): ModelAdapter {
  return {
    idempotentSubmit: options.idempotentSubmit,
    async submit(body, { idempotencyKey }, ctx): Promise<Submission> {
      const response = await options.submit(body, idempotencyKey, ctx);
      return { kind: 'request', requestId: response.request_id };
    },
    adopt: (requestId) => ({ kind: 'request', requestId }),
    async track(submission, _script, ctx): Promise<TrackResult> {
      if (submission.kind !== 'request') throw new Error(`a request adapter cannot track a ${submission.kind}`);
      const status = await ctx.client.requests.status(submission.requestId, { signal: ctx.signal });
      // An answer about another request (ids handed out again, a confused gateway) is never taken as this one's.
      checkRequestFollow(submission.requestId, status);
      if (!isFinalStatus(status.status)) return { done: false };
      const final = status.status as FinalStatus;
      const outputs: Record<string, unknown> = { request_id: status.request_id };
      for (const key of ['images', 'video', 'audio', 'audios'] as const) if (status[key] !== undefined) outputs[key] = status[key];
      return {
        done: true,
        status: final,
        files: final === 'completed' ? filesOfStatus(status) : [],
        outputs,
        error: status.error ?? undefined,
      };
    },
    async stop(submission, ctx) {
      if (submission.kind === 'request') return ctx.client.requests.cancel(submission.requestId, { signal: ctx.signal });
      return false;
    },
  };
}
