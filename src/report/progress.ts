/**
 * What a person (or a log shipper) sees while a run goes: subscribers of the runner's typed events.
 * The runner knows nothing of them.
 * - TtyProgress: cli-progress multibars, one per step, with done, failed and in-flight counts, an
 *   ETA and the spend so far against the budget.
 * - LineProgress: outside a TTY (cron, CI), one concise line every few seconds and a summary.
 * - JsonLogs: one JSON event per line, for log shippers.
 * Each takes `quiet`: only errors and the summary.
 */
import cliProgress from 'cli-progress';
import type { RunEvent, RunListener, RunSummary } from '../run/events.js';
import { outcomeWord } from '../run/events.js';
import { formatSpend, formatUsd, jsonUsd } from '../util/format-usd.js';
import { oneLine } from '../util/terminal-text.js';
import { redactingReplacer } from '../util/redact.js';

export interface ProgressSink {
  listener: RunListener;
  /** Stops timers and redraws; call once the run is over. */
  stop(): void;
}

interface Output {
  out(text: string): void;
  err(text: string): void;
}

const usd = formatUsd;

/**
 * The run's last line: its outcome, counts and money, then the sentence that explains a stop unless
 * it was printed already as it happened (`told`), so a message is printed once. The money is the
 * report's net (`s.money`, its total), unknown and unpriced apart, whatever way the run ended; without
 * a report (another process holds the run now) it is what the run committed, and says so.
 */
export function summaryLine(s: RunSummary, told?: string): string {
  const c = s.counts;
  const parts = [`${c.completed} completed`, `${c.failed} failed`, `${c.nsfw} nsfw`, `${c.canceled} canceled`];
  if (c.unknown) parts.push(`${c.unknown} unknown`);
  if (c.reused) parts.push(`${c.reused} reused`);
  if (c.rerolled) parts.push(`${c.rerolled} re-rolled`);
  if (c.inFlight) parts.push(`${c.inFlight} in flight`);
  if (c.pending) parts.push(`${c.pending} not started`);
  const spend = s.money ? `net ${formatSpend(s.money)}` : `committed ${usd(s.estimatedUsd)}`;
  const message = s.message !== undefined && s.message !== told ? `\n${oneLine(s.message)}` : '';
  return `${s.pipeline} ${s.runId}: ${outcomeWord(s.outcome)}; ${parts.join(', ')}; ${spend}; ${(s.durationMs / 1000).toFixed(1)} s; ${s.runDir}${message}`;
}

/** `42s`, `3m07s`, `2h05m`. */
export function formatDuration(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${String(seconds % 60).padStart(2, '0')}s`;
  return `${Math.floor(minutes / 60)}h${String(minutes % 60).padStart(2, '0')}m`;
}

/**
 * Time left for `total - finished` instances at the pace seen since `startedAt`; `--` until the
 * first instance finishes (there is no pace to go by before that).
 */
export function etaText(finished: number, total: number, startedAt: number | undefined, now: number): string {
  if (startedAt === undefined || finished === 0) return '--';
  if (finished >= total) return '0s';
  return formatDuration(((now - startedAt) / finished) * (total - finished));
}

interface StepTally {
  done: number;
  failed: number;
  inFlight: number;
  /** Finished before this process started (a resume): not part of the pace the ETA goes by. */
  before: number;
  /** When its first instance was submitted. */
  startedAt: number | undefined;
}

/** Counts that both progress views keep. */
class Tally {
  readonly steps = new Map<string, StepTally>();
  spentUsd = 0;
  total = 0;
  /** When the first instance of the run was submitted. */
  startedAt: number | undefined;
  /** The stop's sentence, once printed as it happened (run_stopping): the summary does not repeat it. */
  told: string | undefined;

  constructor(readonly now: () => number) {}

  step(id: string): StepTally {
    let s = this.steps.get(id);
    if (!s) {
      s = { done: 0, failed: 0, inFlight: 0, before: 0, startedAt: undefined };
      this.steps.set(id, s);
    }
    return s;
  }

  on(event: RunEvent): void {
    switch (event.type) {
      case 'run_stopping':
        this.told = event.message;
        return;
      case 'run_started':
        this.total = event.instances;
        // A resume starts from where its journal stands, not from zero (issue 26, item 10).
        if (event.already) {
          for (const [id, t] of Object.entries(event.already.steps))
            Object.assign(this.step(id), { done: t.done, failed: t.failed, inFlight: t.inFlight, before: t.done + t.failed });
          this.spentUsd = event.already.spentUsd;
        }
        return;
      case 'instance_submitted': {
        const s = this.step(event.step);
        s.inFlight++;
        s.startedAt ??= this.now();
        this.startedAt ??= s.startedAt;
        this.spentUsd += event.estimatedUsd ?? 0;
        return;
      }
      case 'instance_finished': {
        const s = this.step(event.step);
        s.inFlight = Math.max(0, s.inFlight - 1);
        if (event.status === 'completed') s.done++;
        else {
          s.failed++;
          // Failed, nsfw and canceled requests are refunded (§8): spent is what the account pays.
          this.spentUsd -= event.estimatedUsd ?? 0;
        }
        return;
      }
      case 'instance_rerolled': {
        // The nsfw attempt is refunded and the instance goes on: it is neither done nor failed.
        const s = this.step(event.step);
        s.inFlight = Math.max(0, s.inFlight - 1);
        this.spentUsd -= event.estimatedUsd ?? 0;
        return;
      }
      case 'instance_reused':
        this.step(event.step).done++;
        return;
      case 'instance_failed':
        // A completed instance whose files wait for a sink upload, or a download, is counted done
        // already (instance_finished): it is said, not counted a second time as failed.
        if (event.completed !== true) this.step(event.step).failed++;
        break;
      case 'instance_unknown':
        this.step(event.step).failed++;
        return;
      default:
        return;
    }
  }
}

/**
 * Failures and stops are worth a line even in quiet mode. Each is one line: what it quotes (the
 * service's error text, an instance id made of CSV values) cannot break it, move the cursor or
 * forge another line (terminal-text.ts).
 */
function errorLine(event: RunEvent): string | undefined {
  const line = errorText(event);
  return line === undefined ? undefined : oneLine(line);
}

function errorText(event: RunEvent): string | undefined {
  if (event.type === 'instance_failed') return `${event.instance}: ${event.message}`;
  if (event.type === 'instance_unknown') return `${event.instance}: unknown: ${event.message}`;
  if (event.type === 'run_stopping') return event.message;
  if (event.type === 'throttled')
    return `throttled by the service: waiting ${Math.max(1, Math.round(event.waitMs / 1000))} s; retry budget ${event.retriesLeft} left`;
  if (event.type === 'options_changed') return `resuming with changed options: ${event.changes.join('; ')}`;
  if (event.type === 'gallery_failed') return `warning: ${event.message}; the run goes on`;
  if (event.type === 'journal_corrupt_accepted')
    return `journal line ${event.line} is damaged: ${event.instance === undefined ? 'every instance not yet submitted or final is' : `${event.instance} is`} treated as unknown (--accept-corrupt)`;
  if (event.type === 'instance_finished' && event.status !== 'completed')
    return `${event.instance}: ${event.status}${event.error ? `: ${event.error}` : ''}`;
  return undefined;
}

export class LineProgress implements ProgressSink {
  readonly #tally: Tally;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly output: Output,
    /** `intervalMs`: between two progress lines, default 10,000. */
    private readonly options: { quiet: boolean; intervalMs?: number; now?: () => number },
  ) {
    this.#tally = new Tally(options.now ?? Date.now);
  }

  readonly listener: RunListener = (event) => {
    this.#tally.on(event);
    if (event.type === 'run_started') {
      if (!this.options.quiet)
        this.output.err(`${event.resumed ? 'resuming' : 'running'} ${event.pipeline}: ${event.instances} instance(s) in ${event.runDir}`);
      if (!this.options.quiet) {
        this.#timer = setInterval(() => this.output.err(this.line()), this.options.intervalMs ?? 10_000);
        this.#timer.unref();
      }
      return;
    }
    if (event.type === 'run_finished') {
      this.stop();
      this.output.out(summaryLine(event.summary, this.#tally.told));
      return;
    }
    const line = errorLine(event);
    if (line) this.output.err(line);
  };

  /** `progress: 120/500 done (3 failed), 20 in flight, committed US$6.00, ETA 2m10s` */
  line(): string {
    let done = 0;
    let failed = 0;
    let inFlight = 0;
    let before = 0;
    for (const s of this.#tally.steps.values()) {
      done += s.done;
      failed += s.failed;
      inFlight += s.inFlight;
      before += s.before;
    }
    const eta = etaText(done + failed - before, this.#tally.total - before, this.#tally.startedAt, this.#tally.now());
    return `progress: ${done + failed}/${this.#tally.total} done (${failed} failed), ${inFlight} in flight, committed ${usd(this.#tally.spentUsd)}, ETA ${eta}`;
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/** Secrets out, and amounts of money (`…Usd`) to a millionth, as in every JSON genpipe writes. */
const jsonLogReplacer = (key: string, value: unknown): unknown =>
  typeof value === 'number' && /usd$/i.test(key) ? jsonUsd(value) : redactingReplacer(key, value);

export class JsonLogs implements ProgressSink {
  constructor(
    private readonly output: Output,
    private readonly options: { quiet: boolean },
  ) {}

  readonly listener: RunListener = (event) => {
    if (this.options.quiet && event.type !== 'run_finished' && errorLine(event) === undefined) return;
    // Each string redacted before it is encoded: a secret quoted inside quoted JSON changes spelling.
    this.output.out(JSON.stringify({ time: new Date().toISOString(), ...event }, jsonLogReplacer));
  };

  stop(): void {}
}

export class TtyProgress implements ProgressSink {
  readonly #tally: Tally;
  readonly #bars = new Map<string, cliProgress.SingleBar>();
  readonly #multi: cliProgress.MultiBar;

  constructor(
    private readonly output: Output,
    private readonly options: {
      quiet: boolean;
      budgetUsd?: number | undefined;
      steps: readonly { id: string; count: number }[];
      stream?: NodeJS.WritableStream;
      now?: () => number;
    },
  ) {
    this.#tally = new Tally(options.now ?? Date.now);
    this.#multi = new cliProgress.MultiBar(
      {
        // Our own ETA: cli-progress's shows NULL or INF until it has a pace, and counts submits as progress.
        format: '{step} [{bar}] {value}/{total} | {failed} failed | {inflight} in flight | ETA {time_left} | {spend}',
        barCompleteChar: '#',
        barIncompleteChar: '.',
        hideCursor: true,
        clearOnComplete: false,
        stopOnComplete: false,
        fps: 5,
        ...(options.stream ? { stream: options.stream } : {}),
      },
      cliProgress.Presets.legacy,
    );
    const width = Math.max(...options.steps.map((s) => s.id.length), 4);
    for (const step of options.steps) {
      this.#bars.set(
        step.id,
        this.#multi.create(Math.max(step.count, 1), 0, { step: step.id.padEnd(width), failed: 0, inflight: 0, time_left: '--', spend: '' }),
      );
    }
  }

  readonly listener: RunListener = (event) => {
    this.#tally.on(event);
    if (event.type === 'run_finished') {
      this.stop();
      this.output.out(summaryLine(event.summary, this.#tally.told));
      return;
    }
    const line = errorLine(event);
    if (line) this.#multi.log(`${line}\n`);
    if ('step' in event) this.#render(event.step);
  };

  #render(stepId: string): void {
    const bar = this.#bars.get(stepId);
    const s = this.#tally.steps.get(stepId);
    if (!bar || !s) return;
    const budget = this.options.budgetUsd;
    // Committed, the budget's measure: charged, in flight and unknown, not the report's net.
    const spend =
      budget === undefined ? `committed ${usd(this.#tally.spentUsd)}` : `committed ${usd(this.#tally.spentUsd)} of ${usd(budget)} budget`;
    const finished = s.done + s.failed;
    bar.update(finished, {
      failed: s.failed,
      inflight: s.inFlight,
      time_left: etaText(finished - s.before, bar.getTotal() - s.before, s.startedAt, this.#tally.now()),
      spend,
    });
  }

  #stopped = false;

  stop(): void {
    // The summary line comes after the report, once the session has stopped the bars: drawn once.
    if (this.#stopped) return;
    this.#stopped = true;
    this.#multi.stop();
  }
}

/** Picks the view: JSON logs when asked, bars on a TTY, lines otherwise. */
export function progressFor(
  output: Output,
  options: {
    tty: boolean;
    jsonLogs: boolean;
    quiet: boolean;
    budgetUsd?: number | undefined;
    steps: readonly { id: string; count: number }[];
    intervalMs?: number;
  },
): ProgressSink {
  if (options.jsonLogs) return new JsonLogs(output, options);
  if (options.tty && !options.quiet) return new TtyProgress(output, options);
  return new LineProgress(output, options);
}
