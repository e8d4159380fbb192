/**
 * What the phases of an attempt (submit, follow, download, deliver) share: the run's effects, the
 * executor that submits and follows, the poll schedule, and the hooks told of files. Phases take
 * this and their own inputs, and return a result or an AttemptFate; they settle nothing.
 */
import type { AdapterContext } from '../../models/adapter.js';
import type { ImageSize } from '../../util/image-size.js';
import type { InstanceState } from '../journal/run-state.js';
import type { PollScheduler } from '../polling/poll-schedule.js';
import type { RunEffects } from '../run-context.js';
import type { Executor } from './executor.js';

export type { AttemptWork } from './executor.js';

export interface DriverHooks {
  /** Told of each instance as it finishes, before its state is forgotten (the gallery keeps a cell of it). */
  onFinished?: (id: string, entry: InstanceState) => void;
  /** Told of each file downloaded (its path relative to the run directory), with an image's size when its first bytes told it. */
  onDownloaded?: (path: string, imageSize: ImageSize | undefined) => void;
}

export interface PhaseDeps {
  readonly fx: RunEffects;
  readonly executor: Executor;
  readonly polls: PollScheduler;
  readonly random: () => number;
  readonly hooks: DriverHooks;
}

/** The adapter's view of the run: its client, stop signal and webhook address. */
export function adapterContext(fx: RunEffects): AdapterContext {
  return { client: fx.settings.client, signal: fx.signal, webhookUrl: fx.settings.webhook?.url };
}
