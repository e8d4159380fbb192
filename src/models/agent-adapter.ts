/**
 * Agent turns (§4.6). One session per logical conversation (the runner journals it and passes it
 * back after a resume). A clarifying question (awaiting_input) is answered from the step's
 * scripted replies, in order; with none left, the instance fails with the question's text.
 */
import { GenpipeError } from '../api/errors.js';
import { agentPollInterval, turnOutcome } from '../api/agent.js';
import type { AgentMessage } from '../api/wire.js';
import { acceptFor, type ModelAdapter, type Submission, type TrackResult } from './adapter.js';

export const agentAdapter: ModelAdapter = {
  // A message POST places a reserve; resending it would start a second turn.
  idempotentSubmit: false,
  conversational: true,
  lookDelay: (n, poll) => agentPollInterval(n, poll),
  async submit(body, { script }, ctx): Promise<Submission> {
    const content = (body as { content: string }).content;
    const sessionId = script.sessionId ?? (await ctx.client.agent.createSession({}, { signal: ctx.signal })).session_id;
    const sent = await ctx.client.agent.sendMessage(sessionId, content, { signal: ctx.signal });
    return { kind: 'agent_turn', sessionId, messageId: sent.message_id, firstMessageId: sent.message_id, repliesUsed: 0 };
  },
  async track(submission, script, ctx): Promise<TrackResult> {
    if (submission.kind !== 'agent_turn') throw new Error(`the agent adapter cannot track a ${submission.kind}`);
    // From the message before the turn's first user message is not known; list from the first one
    // and read its cost from the full listing only when the turn has ended.
    const listing = await ctx.client.agent.listMessages(submission.sessionId, { after: submission.messageId, signal: ctx.signal });
    const outcome = turnOutcome(listing, submission.messageId);
    if (!outcome) return { done: false };
    if (outcome.kind === 'awaiting_input') {
      const reply = script.replies?.[submission.repliesUsed];
      if (reply === undefined) {
        return {
          done: true,
          status: 'failed',
          files: [],
          outputs: { session_id: submission.sessionId },
          error: `the agent asked: ${outcome.question} (no scripted reply left; add one to the step's replies)`,
        };
      }
      const sent = await ctx.client.agent.sendMessage(submission.sessionId, reply, { signal: ctx.signal });
      return { done: false, next: { ...submission, messageId: sent.message_id, repliesUsed: submission.repliesUsed + 1 } };
    }
    const cost = await turnCost(submission, ctx);
    const media = mediaOf(outcome.message);
    const outputs = {
      session_id: submission.sessionId,
      message_id: outcome.message.message_id,
      answer: outcome.kind === 'completed' ? outcome.answer : '',
      media,
    };
    if (outcome.kind === 'failed')
      return {
        done: true,
        status: 'failed',
        files: [],
        outputs,
        error: 'the agent turn failed (its reserve is refunded)',
        actualCostUsd: cost,
      };
    return {
      done: true,
      status: 'completed',
      files: media.map((m, i) => ({ url: m.url, name: `${m.type}-${i}`, accept: acceptFor(m.type) })),
      outputs,
      actualCostUsd: cost,
    };
  },
  async stop(submission, ctx) {
    if (submission.kind === 'agent_turn') await ctx.client.agent.interrupt(submission.sessionId, { signal: ctx.signal });
  },
};

const MEDIA_PART_TYPES = new Set(['image', 'video', 'audio']);

/**
 * The media the agent generated in its turn: assistant parts of type image, video or audio with a
 * URL (§2.3 leaves other part types to the client; these are the ones with something to download).
 */
export function mediaOf(message: AgentMessage): { type: string; url: string }[] {
  const body = message.message as { parts?: unknown };
  const parts = Array.isArray(body.parts) ? (body.parts as { type?: unknown; url?: unknown }[]) : [];
  const media: { type: string; url: string }[] = [];
  for (const part of parts) {
    const { type, url } = part;
    if (typeof type === 'string' && MEDIA_PART_TYPES.has(type) && typeof url === 'string' && /^https?:\/\//i.test(url))
      media.push({ type, url });
  }
  return media;
}

/** Sums llm_cost_usd over the instance's user messages (the first one and every reply). */
async function turnCost(
  submission: Extract<Submission, { kind: 'agent_turn' }>,
  ctx: Parameters<ModelAdapter['track']>[2],
): Promise<number | undefined> {
  try {
    const all = await ctx.client.agent.listMessages(submission.sessionId, { signal: ctx.signal });
    const start = all.messages.findIndex((m) => m.message_id === submission.firstMessageId);
    const mine = (start >= 0 ? all.messages.slice(start) : []).filter((m) => m.role === 'user' && typeof m.llm_cost_usd === 'number');
    return mine.length === 0 ? undefined : mine.reduce((sum, m) => sum + (m.llm_cost_usd ?? 0), 0);
  } catch (error) {
    if (error instanceof GenpipeError && error.code === 'aborted') throw error;
    return undefined;
  }
}
