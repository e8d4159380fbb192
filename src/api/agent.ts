/** §4.6: the agent API: sessions, messages, interrupt, and a turn waiter that follows rule 6. */
import { baseUrl, segment, type ApiContext, type CallContext } from './context.js';
import { GenpipeError } from './errors.js';
import { sleep } from './sleep.js';
import { validateBody } from './validate.js';
import {
  AGENT_CONTENT_MAX,
  AssistantMessageBody,
  UserMessageBody,
  InterruptResponse,
  MessagesResponse,
  SendMessageRequest,
  SendMessageResponse,
  SessionResponse,
  type AgentMessage,
  type SessionStatus,
} from './wire.js';

export const AGENT_BASE_PATH = '/v1/agent';

export interface TurnPollOptions {
  /** First interval, in milliseconds (rule 6: 2 seconds). */
  initialMs: number;
  /** Largest interval, in milliseconds (rule 6: 10 seconds). */
  maxMs: number;
  /** Growth per poll; "gradually" (rule 6). */
  factor: number;
}

export const AGENT_POLL: TurnPollOptions = { initialMs: 2_000, maxMs: 10_000, factor: 1.5 };

/** Interval before poll number `n` (from 0): 2 s, 3 s, 4.5 s, 6.75 s, 10 s, 10 s, ... */
export const agentPollInterval = (n: number, poll: TurnPollOptions = AGENT_POLL): number =>
  Math.min(poll.maxMs, Math.round(poll.initialMs * poll.factor ** n));

/** How a turn ended, as far as the waiter is concerned. */
export type TurnOutcome =
  | { kind: 'completed'; answer: string; message: AgentMessage; llmCostUsd: number | undefined }
  | { kind: 'failed'; message: AgentMessage; llmCostUsd: number | undefined }
  | { kind: 'awaiting_input'; question: string; message: AgentMessage };

/** Concatenates the `text` parts of an assistant message (§2.3); other part types are ignored. */
export function answerText(message: AgentMessage): string {
  const assistant = AssistantMessageBody.safeParse(message.message);
  if (assistant.success) return assistant.data.parts.map((p) => (p.type === 'text' ? (p.text ?? '') : '')).join('');
  const user = UserMessageBody.safeParse(message.message);
  return user.success ? user.data.text : '';
}

export class AgentApi {
  constructor(private readonly ctx: ApiContext) {}

  #url(path: string): string {
    return baseUrl(this.ctx, `${AGENT_BASE_PATH}${path}`);
  }

  /** `POST /sessions` (201). One session per logical conversation (rule 1). */
  async createSession(config: Record<string, unknown> = {}, options: CallContext = {}): Promise<SessionResponse> {
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: this.#url('/sessions'),
      auth: 'key',
      json: { config },
      schema: SessionResponse,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }

  /**
   * `POST /sessions/{id}/messages` (202). Places a credit reserve. A 409 is raised as
   * `session_busy` (not charged: wait for the turn or interrupt); a 502 is refunded by the service,
   * so it is retried with backoff; a 402 is raised as `insufficient_credits`.
   */
  async sendMessage(sessionId: string, content: string, options: CallContext = {}): Promise<SendMessageResponse> {
    const body = validateBody(SendMessageRequest, { content }, `agent message (content must be 1 to ${AGENT_CONTENT_MAX} characters)`);
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: this.#url(`/sessions/${segment(sessionId)}/messages`),
      auth: 'key',
      json: body,
      schema: SendMessageResponse,
      safety: { kind: 'spends', noChargeStatuses: [502] },
      endpoint: 'agent-messages',
      signal: options.signal,
    });
    return result.data;
  }

  /** `GET /sessions/{id}/messages[?after=message_id]` (rule 4). */
  async listMessages(sessionId: string, options: CallContext & { after?: string | undefined } = {}): Promise<MessagesResponse> {
    const url = new URL(this.#url(`/sessions/${segment(sessionId)}/messages`));
    if (options.after) url.searchParams.set('after', options.after);
    const result = await this.ctx.transport.call({
      method: 'GET',
      url: url.toString(),
      auth: 'key',
      schema: MessagesResponse,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }

  /** `POST /sessions/{id}/interrupt` (202): the turn stops at its next safe point. */
  async interrupt(sessionId: string, options: CallContext = {}): Promise<{ session_id: string; status: SessionStatus }> {
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: this.#url(`/sessions/${segment(sessionId)}/interrupt`),
      auth: 'key',
      schema: InterruptResponse,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }

  /**
   * Waits for the turn started by `userMessageId`, polling from 2 s up to 10 s (rule 6), until the
   * assistant message that answers it is terminal, or the session parks on a question
   * (`awaiting_input`, rule 7: it never times out by itself, so the caller decides).
   * `after` is the message before the user message, so that the user message, which carries
   * llm_cost_usd, is in every listing; without it, polls list only what follows the user message
   * and one full listing at the end reads the cost.
   */
  async waitForTurn(
    sessionId: string,
    userMessageId: string,
    options: CallContext & { after?: string | undefined; poll?: TurnPollOptions; maxPolls?: number } = {},
  ): Promise<TurnOutcome> {
    const poll = options.poll ?? AGENT_POLL;
    const maxPolls = options.maxPolls ?? Number.POSITIVE_INFINITY;
    for (let n = 0; n < maxPolls; n++) {
      await sleep(agentPollInterval(n, poll), options.signal);
      const listing = await this.listMessages(sessionId, { after: options.after ?? userMessageId, signal: options.signal });
      const outcome = turnOutcome(listing, userMessageId);
      if (!outcome) continue;
      if (outcome.kind === 'awaiting_input' || outcome.llmCostUsd !== undefined) return outcome;
      // Polling after the user message keeps each poll small, but the cost sits on the user
      // message itself (§2.3): read it once, from the full listing, now that the turn is over.
      const full = await this.listMessages(sessionId, { signal: options.signal });
      return { ...outcome, llmCostUsd: full.messages.find((m) => m.message_id === userMessageId)?.llm_cost_usd };
    }
    throw new GenpipeError('timeout', `The agent turn ${userMessageId} did not end within ${maxPolls} polls.`);
  }
}

/** Reads a messages listing and tells whether the turn of `userMessageId` has ended. */
export function turnOutcome(listing: MessagesResponse, userMessageId: string): TurnOutcome | undefined {
  const messages = listing.messages;
  const userIndex = messages.findIndex((m) => m.message_id === userMessageId);
  const user = userIndex >= 0 ? messages[userIndex] : undefined;
  const after = userIndex >= 0 ? messages.slice(userIndex + 1) : messages;
  const assistant = [...after].reverse().find((m) => m.role === 'assistant');
  if (!assistant) return undefined;
  if (listing.status === 'awaiting_input') return { kind: 'awaiting_input', question: answerText(assistant), message: assistant };
  if (listing.status !== 'idle' || assistant.status === 'processing') return undefined;
  const llmCostUsd = user?.llm_cost_usd;
  if (assistant.status === 'failed') return { kind: 'failed', message: assistant, llmCostUsd };
  return { kind: 'completed', answer: answerText(assistant), message: assistant, llmCostUsd };
}
