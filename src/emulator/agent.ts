/**
 * §2.2–2.3, §3.2, §4.6: the agent API. Durable sessions, one turn at a time, a credit reserve per
 * message that opens a turn, reconciliation on completion, a full refund on failure (and on an
 * injected 502). Turns are driven by the scripted agent on the scheduler; every step is a safe point
 * where an interrupt takes effect.
 */
import { CreateSessionRequest, SendMessageRequest, type SessionStatus } from '../api/wire.js';
import { authKey, requireAgent } from './auth.js';
import { SHEET_HEIGHT, SHEET_TRUE_WIDTH, SHEET_WIDTH } from './character-sheet.js';
import { newHex, newUuid } from './ids.js';
import { HttpError, isoMs, json, parseJson, validate, type EmuResponse } from './http-util.js';
import { usdToMicros, type AccountState, type Ledger } from './ledger.js';
import { MODELS } from './models.js';
import type { Rng } from './prng.js';
import type { EmuRequest, RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';
import type { Scheduler } from './scheduler.js';
import { llmCostMicros, planReply, planTurn, type TurnPlan } from './scripted-agent.js';
import { bodyHash } from './submit.js';
import { marketingUsage } from './token-model.js';

export interface AgentOptions {
  /** Fixed reserve per message that opens a turn (§8 rule 3), US$. Default 0.50 (50 credits). */
  reserveUsd: number;
  /** Service time of one turn step, ms (scaled). Default 1,500. */
  stepMs: number;
  /** Probability that a turn errors by itself. Default 0. */
  turnFailureRate: number;
  /**
   * The status of the assistant message holding a question while the session is parked (the spec
   * is silent): `completed` (the default; the message is written) or `processing` (the turn is not
   * over), so a client can be tested against both readings. A `processing` question completes,
   * with the user messages it answers, when the reply arrives.
   */
  questionStatus: 'completed' | 'processing';
}

export const DEFAULT_AGENT_OPTIONS: AgentOptions = { reserveUsd: 0.5, stepMs: 1_500, turnFailureRate: 0, questionStatus: 'completed' };
/** `#hold` turns end by themselves after this many steps. */
export const HOLD_MAX_STEPS = 600;

interface Message {
  message_id: string;
  role: 'user' | 'assistant';
  status: 'processing' | 'completed' | 'failed';
  message: { type: 'text'; text: string } | { id: string; role: 'assistant'; parts: Record<string, unknown>[] };
  created_at: number;
  llm_cost_usd?: number;
}

interface Turn {
  /** The user message that placed the reserve. */
  reserveMessageId: string;
  reserveMicros: number;
  userMessages: Message[];
  assistant: Message;
  plan: TurnPlan;
  /** The text the turn opened with (for the reply's plan). */
  opening: string;
  interrupted: boolean;
  steps: number;
  outputTokens: number;
  generation: EmuRequest | undefined;
  parts: Record<string, unknown>[];
  cancelStep: (() => void) | undefined;
}

export interface Session {
  id: string;
  keyId: string;
  status: SessionStatus;
  config: Record<string, unknown>;
  messages: Message[];
  /** Conversation memory: every message text, re-read each turn (durable sessions, rule 1). */
  memoryChars: number;
  turn: Turn | undefined;
}

export interface AgentDeps {
  ledger: Ledger;
  requests: RequestStore;
  scheduler: Scheduler;
  rng: Rng;
  options: AgentOptions;
}

export class AgentService {
  readonly sessions = new Map<string, Session>();
  #lastCreatedAt = 0;

  constructor(private readonly d: AgentDeps) {}

  #account(input: RouteInput): AccountState {
    const account = authKey(this.d.ledger, input.headers);
    requireAgent(account);
    return account;
  }

  #session(input: RouteInput, account: AccountState): Session {
    const s = this.sessions.get(input.params.id ?? '');
    if (!s || s.keyId !== account.keyId) throw new HttpError(404, 'session not found');
    return s;
  }

  /** created_at strictly increases, so `after` and ordering agree even within one millisecond. */
  #now(): number {
    const t = Math.max(Date.now(), this.#lastCreatedAt + 1);
    this.#lastCreatedAt = t;
    return t;
  }

  #message(role: Message['role'], body: Message['message'] | undefined, status: Message['status']): Message {
    const id = `msg_${newHex(12)}`;
    return { message_id: id, role, status, message: body ?? { id, role: 'assistant', parts: [] }, created_at: this.#now() };
  }

  /** `POST /v1/agent/sessions` → 201. */
  createSession(input: RouteInput): EmuResponse {
    const account = this.#account(input);
    const body = validate(CreateSessionRequest, parseJson(input.body) ?? {});
    const s: Session = {
      id: newUuid(),
      keyId: account.keyId,
      status: 'idle',
      config: body.config ?? {},
      messages: [],
      memoryChars: 0,
      turn: undefined,
    };
    this.sessions.set(s.id, s);
    return json(201, { session_id: s.id, status: s.status });
  }

  /** `POST /v1/agent/sessions/{id}/messages` → 202, or 409 session_busy, 402, 502. */
  sendMessage(input: RouteInput): EmuResponse {
    const account = this.#account(input);
    const s = this.#session(input, account);
    const body = validate(SendMessageRequest, parseJson(input.body));
    // An injected 502 (§7) is applied on every path: a reply or a busy session is answered 502 with
    // nothing changed and nothing charged, a new turn places its reserve and refunds it (below).
    const backendDown = input.fault.status === 502;
    if (s.status === 'processing') {
      if (backendDown) throw backendUnavailable();
      throw new HttpError(409, 'session_busy: a turn is already running in this session; wait for it to end or interrupt it');
    }
    if (s.status === 'awaiting_input' && s.turn) {
      if (backendDown) throw backendUnavailable();
      return this.#reply(s, s.turn, body.content);
    }

    const reserve = usdToMicros(this.d.options.reserveUsd);
    if (account.balanceMicros < reserve) {
      throw new HttpError(402, `insufficient credit balance for the message reserve of ${this.d.ledger.creditsOf(reserve)} credits`);
    }
    const user = this.#message('user', { type: 'text', text: body.content }, 'processing');
    this.d.ledger.record(account.keyId, 'reserve', reserve, { messageId: user.message_id }, 'agent message reserve');
    if (backendDown) {
      // The backend failed after the reserve was placed: refund it and forget the message (§7 502).
      this.d.ledger.record(account.keyId, 'refund', reserve, { messageId: user.message_id }, 'agent backend unavailable (502): refunded');
      throw backendUnavailable();
    }
    s.messages.push(user);
    s.memoryChars += body.content.length;
    const assistant = this.#message('assistant', undefined, 'processing');
    s.messages.push(assistant);
    const plan: TurnPlan = this.d.rng.chance(this.d.options.turnFailureRate) ? { kind: 'fail' } : planTurn(body.content);
    s.turn = {
      reserveMessageId: user.message_id,
      reserveMicros: reserve,
      userMessages: [user],
      assistant,
      plan,
      opening: body.content,
      interrupted: false,
      steps: 0,
      outputTokens: 0,
      generation: undefined,
      parts: [{ type: 'reasoning', text: `Planning: ${plan.kind}.` }],
      cancelStep: undefined,
    };
    s.status = 'processing';
    this.#schedule(s, s.turn);
    return json(202, { message_id: user.message_id, status: 'processing' });
  }

  /** awaiting_input + reply → processing: the same turn resumes (no new reserve). */
  #reply(s: Session, turn: Turn, content: string): EmuResponse {
    // A question left `processing` (questionStatus) is answered now: it and what it answers complete.
    turn.assistant.status = 'completed';
    for (const u of turn.userMessages) u.status = 'completed';
    const user = this.#message('user', { type: 'text', text: content }, 'processing');
    s.messages.push(user);
    s.memoryChars += content.length;
    turn.userMessages.push(user);
    turn.plan = planReply(turn.opening, content);
    turn.assistant = this.#message('assistant', undefined, 'processing');
    s.messages.push(turn.assistant);
    s.status = 'processing';
    this.#schedule(s, turn);
    return json(202, { message_id: user.message_id, status: 'processing' });
  }

  /** `POST /v1/agent/sessions/{id}/interrupt` → 202: stops at the next safe point. */
  interrupt(input: RouteInput): EmuResponse {
    const account = this.#account(input);
    const s = this.#session(input, account);
    const turn = s.turn;
    if (turn && s.status !== 'idle') {
      turn.interrupted = true;
      if (s.status === 'awaiting_input') {
        s.status = 'processing';
        turn.assistant.status = 'completed';
        turn.assistant = this.#message('assistant', undefined, 'processing');
        s.messages.push(turn.assistant);
      }
      // The safe point comes at once rather than after the rest of the current step.
      turn.cancelStep?.();
      turn.cancelStep = this.d.scheduler.after(0, () => this.#step(s, turn));
    }
    return json(202, { session_id: s.id, status: s.status });
  }

  /** `GET /v1/agent/sessions/{id}/messages[?after=message_id]`. */
  listMessages(input: RouteInput): EmuResponse {
    const account = this.#account(input);
    const s = this.#session(input, account);
    const after = input.url.searchParams.get('after');
    let messages = s.messages;
    if (after !== null && after !== '') {
      const at = s.messages.findIndex((m) => m.message_id === after);
      if (at < 0) throw new HttpError(400, `after: no message ${after} in this session`);
      messages = s.messages.slice(at + 1);
    }
    return json(200, { status: s.status, messages: messages.map(view) });
  }

  #schedule(s: Session, turn: Turn): void {
    turn.cancelStep = this.d.scheduler.after(this.d.scheduler.scale(this.d.options.stepMs), () => this.#step(s, turn));
  }

  /** One step of a turn; each step is a safe point. */
  #step(s: Session, turn: Turn): void {
    turn.cancelStep = undefined;
    if (s.turn !== turn) return;
    turn.steps++;
    turn.outputTokens += 40;
    if (turn.interrupted) return this.#settle(s, turn, 'completed', 'Stopped: the turn was interrupted.');
    const plan = turn.plan;
    switch (plan.kind) {
      case 'fail':
        return this.#settle(s, turn, 'failed', 'The turn failed: the agent hit an internal error (emulated). The reserve was refunded.');
      case 'answer':
        return this.#settle(s, turn, 'completed', plan.text);
      case 'hold':
        if (turn.steps >= HOLD_MAX_STEPS) return this.#settle(s, turn, 'completed', `Held for ${turn.steps} steps.`);
        return this.#schedule(s, turn);
      case 'ask':
        // Park on the question; the assistant message holding it is complete and answers the user message.
        turn.assistant.message = { id: turn.assistant.message_id, role: 'assistant', parts: [{ type: 'text', text: plan.question }] };
        if (this.d.options.questionStatus === 'completed') {
          turn.assistant.status = 'completed';
          for (const u of turn.userMessages) u.status = 'completed';
        }
        turn.outputTokens += 20;
        s.status = 'awaiting_input';
        return;
      case 'generate':
        return this.#generate(s, turn, plan);
    }
  }

  #generate(s: Session, turn: Turn, plan: Extract<TurnPlan, { kind: 'generate' }>): void {
    if (!turn.generation) {
      const r = this.#startGeneration(s.keyId, plan);
      if (typeof r === 'string') return this.#settle(s, turn, 'completed', r);
      turn.generation = r;
      turn.parts.push({ type: 'tool_call', name: plan.model, request_id: r.id });
      return this.#schedule(s, turn);
    }
    const r = turn.generation;
    const status = this.d.requests.statusOf(r);
    if (status === 'queued' || status === 'in_progress') {
      // Wait for the generation in short safe steps, never longer than it has left.
      const left = Math.max(0, r.endAt - Date.now());
      turn.cancelStep = this.d.scheduler.after(Math.min(left + 1, this.d.scheduler.scale(this.d.options.stepMs)), () =>
        this.#step(s, turn),
      );
      return;
    }
    turn.parts.push({ type: 'tool_result', request_id: r.id, status });
    if (status === 'completed') {
      const url = this.d.requests.outputs(r).images?.[0]?.url ?? '';
      turn.parts.push({ type: 'image', url });
      return this.#settle(
        s,
        turn,
        'completed',
        `Here is your ${plan.model === 'character-sheet' ? 'character sheet' : 'marketing image'}: ${url}`,
      );
    }
    return this.#settle(
      s,
      turn,
      'completed',
      `The ${plan.model} generation ended ${status}${r.error ? `: ${r.error}` : ''}; it was refunded.`,
    );
  }

  /** A billed generation on the account (§8 rule 4), or a sentence saying why it could not start. */
  #startGeneration(keyId: string, plan: Extract<TurnPlan, { kind: 'generate' }>): EmuRequest | string {
    const account = this.d.ledger.accounts.get(keyId);
    // The agent's generations need model access as any other (service spec §5).
    if (account?.models !== undefined && !account.models.has(plan.model))
      return `I could not start the ${plan.model === 'character-sheet' ? 'character sheet' : 'marketing image'}: this account has no model access to ${plan.model}.`;
    if (plan.model === 'character-sheet') {
      const price = usdToMicros(MODELS['character-sheet'].priceUsd);
      if (!account || account.balanceMicros < price) return 'I could not start the character sheet: the credit balance is too low.';
      const seed = this.d.rng.int(1, 1_000_000);
      return this.d.requests.create({
        keyId,
        model: 'character-sheet',
        modelPath: '/v1/agent (character sheet)',
        bodyHash: bodyHash({ tier: plan.tier, brief: plan.prompt }),
        chargedMicros: price,
        art: {
          width: SHEET_WIDTH,
          height: SHEET_HEIGHT,
          longSide: SHEET_TRUE_WIDTH,
          layout: 'sheet',
          tier: plan.tier,
          variationIndex: 0,
          seedText: `${plan.tier}|${seed}|0|agent`,
        },
        text: plan.prompt,
        details: { via: 'agent', tier: plan.tier },
      });
    }
    const body = { prompt: plan.prompt, resolution: '1k' as const, quality: 'medium' as const };
    const usage = marketingUsage(body, '1k', 'medium', this.d.rng.between(0.85, 1));
    if (!account || account.balanceMicros < usage.estimate.micros)
      return 'I could not start the marketing image: the credit balance is too low.';
    return this.d.requests.create({
      keyId,
      model: 'marketing-image',
      modelPath: '/v1/agent (marketing image)',
      bodyHash: bodyHash(body),
      chargedMicros: usage.estimate.micros,
      actualMicros: usage.actual.micros,
      art: { width: 160, height: 160, longSide: 1024, layout: 'render', seedText: `marketing|${plan.prompt}|agent` },
      text: plan.prompt,
      details: { via: 'agent', mode: 'direct-generate', resolution: '1k', quality: 'medium' },
    });
  }

  /** Ends the turn (§3.2): completed reconciles the reserve, failed refunds it in full. */
  #settle(s: Session, turn: Turn, outcome: 'completed' | 'failed', text: string): void {
    turn.cancelStep?.();
    const a = turn.assistant;
    a.message = { id: a.message_id, role: 'assistant', parts: [...turn.parts, { type: 'text', text }] };
    a.status = outcome;
    const last = turn.userMessages[turn.userMessages.length - 1];
    for (const u of turn.userMessages) if (u.status === 'processing') u.status = outcome;
    const ledger = this.d.ledger;
    const ref = { messageId: turn.reserveMessageId };
    if (outcome === 'failed') {
      ledger.record(s.keyId, 'refund', turn.reserveMicros, ref, 'agent turn failed: reserve refunded in full');
      if (last) last.llm_cost_usd = 0;
    } else {
      const cost = Math.min(turn.reserveMicros, llmCostMicros(s.memoryChars, turn.outputTokens));
      ledger.record(s.keyId, 'refund', turn.reserveMicros - cost, ref, `agent turn reconciled to LLM usage of ${cost / 1e6} US$`);
      if (last) last.llm_cost_usd = cost / 1e6;
    }
    s.memoryChars += text.length;
    s.turn = undefined;
    s.status = 'idle';
  }
}

const backendUnavailable = (): HttpError =>
  new HttpError(502, 'agent backend temporarily unavailable; the message was refunded, retry with backoff');

function view(m: Message): Record<string, unknown> {
  const out: Record<string, unknown> = {
    message_id: m.message_id,
    role: m.role,
    status: m.status,
    message: m.message,
    created_at: isoMs(m.created_at),
  };
  if (m.llm_cost_usd !== undefined) out.llm_cost_usd = m.llm_cost_usd;
  return out;
}
