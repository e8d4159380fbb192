/**
 * The contract between the runner and a generation model. The runner owns scheduling, limits,
 * journaling and downloads; an adapter only knows its model: how to submit, how to look at a
 * submission once, and what its outputs are.
 */
import type { TurnPollOptions } from '../api/agent.js';
import type { GenerationClient } from '../api/client.js';
import type { RequestStatusValue } from '../api/wire.js';

/** What a submit returned, enough to find the work again after a crash. Journaled as is. */
export type Submission =
  | { kind: 'request'; requestId: string }
  | { kind: 'job_set'; jobSetId: string }
  | {
      kind: 'agent_turn';
      sessionId: string;
      /** The user message whose turn is being waited for (the latest reply, after a question). */
      messageId: string;
      /** The first user message of the instance: its turn's costs are read from there. */
      firstMessageId: string;
      /** Scripted replies used so far. */
      repliesUsed: number;
    };

/** One output file of a finished instance. */
export interface OutputRef {
  url: string;
  /** A short name genpipe gives the file, such as `image-0` or `video` (never taken from the URL). */
  name: string;
  /** Content types accepted for it. */
  accept: readonly string[];
}

export type FinalStatus = Extract<RequestStatusValue, 'completed' | 'failed' | 'nsfw' | 'canceled'>;

export type TrackResult =
  | { done: false; /** Set when the submission moved on (an agent reply was sent). */ next?: Submission }
  | {
      done: true;
      status: FinalStatus;
      /** Files to download (completed only). */
      files: OutputRef[];
      /** What downstream templates read as `upstream.outputs`. */
      outputs: Record<string, unknown>;
      error?: string | undefined;
      /** Cost the service reported (agent llm_cost_usd), in US$. */
      actualCostUsd?: number | undefined;
    };

export interface AdapterContext {
  client: GenerationClient;
  signal: AbortSignal;
  /** Webhook URL for models that take one (`?hf_webhook=`), when the run uses webhooks. */
  webhookUrl?: string | undefined;
  /**
   * The body the followed submission was sent with, when known (local image paths replaced by
   * their uploaded URLs): `track` checks the service's answer echoes it (follow-check.ts).
   */
  sentBody?: unknown;
}

export interface InstanceScript {
  /** Agent steps: scripted replies to clarifying questions, in order. */
  replies?: readonly string[] | undefined;
  /** Agent steps: the session of this instance's conversation, when one exists already. */
  sessionId?: string | undefined;
}

export interface ModelAdapter {
  /** True when a resubmit with the same key cannot create a second paid request. */
  readonly idempotentSubmit: boolean;
  /**
   * A conversation (agent turns, §4.6): one turn per session at a time, its clarifying questions
   * answered from the manifest. Its turns run where the manifest is read (a fleet's coordinator),
   * and are stopped (interrupted) on Ctrl-C, not only with --cancel-on-abort.
   */
  readonly conversational?: boolean | undefined;
  /**
   * The wait before the n-th look at a submission, for a model that paces its own looks (agent
   * turns); others follow the run's poll schedule (poll-schedule.ts).
   */
  lookDelay?(n: number, poll: TurnPollOptions | undefined): number;
  submit(body: unknown, options: { idempotencyKey?: string | undefined; script: InstanceScript }, ctx: AdapterContext): Promise<Submission>;
  /**
   * The submission behind an id the service gave a submit that the journal could not record
   * (`resume --adopt INSTANCE=ID`), so it is followed instead of sent again. Absent: the model's
   * submissions cannot be adopted (an agent turn is more than one id).
   */
  adopt?(id: string): Submission;
  /** Looks at a submission once. */
  track(submission: Submission, script: InstanceScript, ctx: AdapterContext): Promise<TrackResult>;
  /**
   * Stops work in flight where the model allows it (agent interrupt, queued request cancel).
   * Resolves true when the service accepted a cancel, so the request ends canceled.
   */
  stop?(submission: Submission, ctx: AdapterContext): Promise<boolean | void>;
}

const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'] as const;
const VIDEO_TYPES = ['video/mp4', 'video/webm', 'video/quicktime'] as const;
const AUDIO_TYPES = ['audio/wav', 'audio/x-wav', 'audio/wave', 'audio/mpeg', 'audio/mp4'] as const;

/** The output files of a RequestStatus (§2.1): images, video, audio, audios. */
export function filesOfStatus(status: {
  images?: { url: string }[] | undefined;
  video?: { url: string } | undefined;
  audio?: { url: string } | undefined;
  audios?: { url: string }[] | undefined;
}): OutputRef[] {
  const files: OutputRef[] = [];
  status.images?.forEach((m, i) => files.push({ url: m.url, name: `image-${i}`, accept: IMAGE_TYPES }));
  if (status.video) files.push({ url: status.video.url, name: 'video', accept: VIDEO_TYPES });
  if (status.audio) files.push({ url: status.audio.url, name: 'audio', accept: AUDIO_TYPES });
  status.audios?.forEach((m, i) => files.push({ url: m.url, name: `audio-${i}`, accept: AUDIO_TYPES }));
  return files;
}

/** Content types accepted for a job result of a given `type` (image, video, audio). */
export function acceptFor(type: string): readonly string[] {
  if (type === 'image') return IMAGE_TYPES;
  if (type === 'audio') return AUDIO_TYPES;
  return VIDEO_TYPES;
}
