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
import { RunFold } from '../run/journal/run-fold.js';

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
  const throttled =
    s.throttledMs !== undefined && s.throttledMs > 0 ? ` (${(s.throttledMs / 1000).toFixed(1)} s waited on throttling)` : '';
  return `${s.pipeline} ${s.runId}: ${outcomeWord(s.outcome)}; ${parts.join(', ')}; ${spend}; ${(s.durationMs / 1000).toFixed(1)} s${throttled}; ${s.runDir}${message}`;
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

/** Widest a bar gets, however wide the terminal. */
const MAX_BAR = 40;
/** Narrowest bar worth drawing: below it the line has no bar at all. */
const MIN_BAR = 5;
/** Shortest a step name is cut to (with `…`) before the ETA is left out. */
const SHORT_STEP = 12;

/** What one step's bar line says. */
export interface BarParts {
  step: string;
  done: number;
  total: number;
  failed: number;
  inFlight: number;
  eta: string;
}

/** What the bars of a run share so they line up: the widest step name, and the digits of the largest count. */
export interface BarLayout {
  stepWidth: number;
  digits: number;
}

/** `name` in at most `width` characters: cut, with `…`, when longer. */
const cut = (name: string, width: number): string => (name.length <= width ? name : `${name.slice(0, Math.max(1, width - 1))}…`);

/**
 * One step's line for a terminal of `columns`, never longer than `columns - 1` (the last column
 * left free, so no terminal wraps it): its counts always; what room is left goes to the ETA, the
 * step's full name and then the bar, up to 40 wide. When the room is short the bar shrinks first,
 * then goes, then the step name is cut to 12, then the ETA goes, then the name is cut further.
 * The run's spend has a line of its own (spendLine): it is the run's, not a step's.
 */
export function barLine(
  columns: number,
  parts: BarParts,
  layout: BarLayout = { stepWidth: parts.step.length, digits: String(parts.total).length },
): string {
  const room = Math.max(columns, 20) - 1;
  const n = (value: number): string => String(value).padStart(layout.digits);
  // Padded alike on every step's line, so that their bars have one width and line up.
  const counts = `${n(parts.done)}/${String(parts.total).padEnd(layout.digits)} | ${n(parts.failed)} failed | ${n(parts.inFlight)} in flight`;
  const eta = ` | ETA ${parts.eta.padEnd(5)}`;
  const name = parts.step.padEnd(layout.stepWidth);
  const bar = (width: number): string => {
    const filled = parts.total > 0 ? Math.round((Math.min(parts.done, parts.total) / parts.total) * width) : 0;
    return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
  };
  const fits = (line: string): boolean => line.trimEnd().length <= room;
  // With the bar: name, space, [bar], space, counts, ETA.
  const barRoom = room - name.length - counts.length - eta.length - 4;
  if (barRoom >= MIN_BAR) return `${name} ${bar(Math.min(MAX_BAR, barRoom))} ${counts}${eta}`.trimEnd();
  const short = cut(parts.step, SHORT_STEP).padEnd(Math.min(layout.stepWidth, SHORT_STEP));
  for (const line of [`${name} ${counts}${eta}`, `${short} ${counts}${eta}`, `${short} ${counts}`]) if (fits(line)) return line.trimEnd();
  const left = room - 1 - counts.length;
  if (left >= 2) return `${cut(parts.step, left).padEnd(left)} ${counts}`;
  return counts.slice(0, room);
}

/** The run's spend line under the bars, within `columns - 1`. */
export const spendLine = (columns: number, spend: string): string => cut(spend, Math.max(columns, 20) - 1);

/**
 * `text` wrapped at spaces to lines of at most `columns - 1` characters (each line of it, its own
 * newlines kept); a word longer than a line (a path) is split, at a `/` where it has one.
 */
export function wrapWords(text: string, columns: number): string {
  const width = Math.max(columns, 20) - 1;
  return text
    .split('\n')
    .map((paragraph) => {
      const lines: string[] = [];
      let line = '';
      for (let word of paragraph.split(' ')) {
        while (word.length > width) {
          // A word of its own line's length or more: broken after its last `/` that fits, else at the width.
          if (line !== '') {
            lines.push(line);
            line = '';
          }
          const slash = word.lastIndexOf('/', width - 1);
          const at = slash > 0 ? slash + 1 : width;
          lines.push(word.slice(0, at));
          word = word.slice(at);
        }
        if (line === '') line = word;
        else if (line.length + 1 + word.length <= width) line += ` ${word}`;
        else {
          lines.push(line);
          line = word;
        }
      }
      lines.push(line);
      return lines.join('\n');
    })
    .join('\n');
}

/**
 * The width the summary is wrapped to: that of stdout's terminal, undefined when stdout is not one
 * (a file or a pipe keeps the summary on one line, for whatever reads it).
 */
export type SummaryColumns = () => number | undefined;

const stdoutColumns: SummaryColumns = () => (process.stdout.isTTY ? process.stdout.columns : undefined);

function wrapSummary(text: string, columns: SummaryColumns = stdoutColumns): string {
  const width = columns();
  return width === undefined ? text : wrapWords(text, width);
}

/** One step's counts, as a progress view says them. */
interface StepTally {
  /** Completed and reused. */
  done: number;
  /** Failed, nsfw and canceled. */
  failed: number;
  /** Submits whose fate is unknown: apart from failures, as the report counts them. */
  unknown: number;
  inFlight: number;
  /** Ended before this process started (a resume): not part of the pace the ETA goes by. */
  before: number;
  /** When its first instance was sent in this process. */
  startedAt: number | undefined;
}

/** Ended, as the bars count: done, failed or unknown. */
const ended = (s: Pick<StepTally, 'done' | 'failed' | 'unknown'>): number => s.done + s.failed + s.unknown;

/**
 * What both progress views read: the run's journal folded by the fold the report reads
 * (run-fold.ts), fed the records the run journals (`instance_journaled`), so the counts and money a
 * view shows are the report's. A live run knows one thing its journal does not: an intent just
 * journaled is being sent, so it is shown in flight, not unknown, until the service answers or
 * the run says it is unknown.
 */
class Tally {
  /** Undefined until run_started: records journaled before it are in the fold it brings. */
  #fold: RunFold | undefined;
  /** Instances being sent (an intent journaled by this process, no answer yet), by instance: their step. */
  readonly #sending = new Map<string, string>();
  readonly #sendingBySteps = new Map<string, number>();
  /** Ended by step when this process started (a resume). */
  readonly #before = new Map<string, number>();
  readonly #startedAt = new Map<string, number>();
  /** The budget the run runs under, as its run_started event tells it (never guessed from the manifest here). */
  budgetUsd: number | undefined = undefined;
  total = 0;
  /** When the first instance of the run was sent by this process. */
  startedAt: number | undefined;
  /** The stop's sentence, once printed as it happened (run_stopping): the summary does not repeat it. */
  told: string | undefined;

  constructor(readonly now: () => number) {}

  /** The run's fold as far as this view has seen it. */
  get fold(): RunFold {
    return (this.#fold ??= new RunFold());
  }

  /** Committed, the budget's measure, and the budget beside it when the run has one: the same words in every progress view. */
  committedText(): string {
    const committed = `committed ${usd(this.fold.money().committedUsd)}`;
    return this.budgetUsd === undefined ? committed : `${committed} of ${usd(this.budgetUsd)} budget`;
  }

  /** The steps with counts: the plan's, and any a record named. */
  stepIds(): string[] {
    return this.fold.steps();
  }

  step(id: string): StepTally {
    const c = this.fold.counts(id);
    const sending = this.#sendingBySteps.get(id) ?? 0;
    return {
      done: c.completed + c.reused,
      failed: c.failed + c.nsfw + c.canceled,
      unknown: Math.max(0, c.unknown - sending),
      inFlight: c.in_flight + sending,
      before: this.#before.get(id) ?? 0,
      startedAt: this.#startedAt.get(id),
    };
  }

  on(event: RunEvent): void {
    switch (event.type) {
      case 'run_stopping':
        this.told = event.message;
        return;
      case 'run_started':
        this.total = event.instances;
        this.budgetUsd = event.budgetUsd;
        // A resume starts from where its journal stands, not from zero, so its count never runs backwards.
        this.#fold = event.already ? event.already.copy() : new RunFold(event.steps);
        for (const id of this.#fold.steps()) this.#before.set(id, ended(this.step(id)));
        return;
      case 'instance_journaled':
        this.#journaled(event);
        return;
      case 'instance_unknown':
        this.#answered(event.instance);
        return;
      case 'instance_failed':
        // Left for a resume or failed here: no longer being sent. A completed one's files are said apart.
        if (event.completed !== true) this.#answered(event.instance);
        return;
      default:
        return;
    }
  }

  #journaled(event: Extract<RunEvent, { type: 'instance_journaled' }>): void {
    // Before run_started: the fold that event brings holds it already.
    if (!this.#fold) return;
    this.#fold.apply(event.record);
    if (event.record.type !== 'intent') {
      this.#answered(event.instance);
      return;
    }
    if (!this.#sending.has(event.instance)) {
      this.#sending.set(event.instance, event.step);
      this.#sendingBySteps.set(event.step, (this.#sendingBySteps.get(event.step) ?? 0) + 1);
    }
    if (!this.#startedAt.has(event.step)) this.#startedAt.set(event.step, this.now());
    this.startedAt ??= this.now();
  }

  #answered(instance: string): void {
    const step = this.#sending.get(instance);
    if (step === undefined) return;
    this.#sending.delete(instance);
    this.#sendingBySteps.set(step, (this.#sendingBySteps.get(step) ?? 1) - 1);
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
  if (event.type === 'instance_skipped') return `${event.instance}: ${event.reason}`;
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
    private readonly options: { quiet: boolean; intervalMs?: number; now?: () => number; summaryColumns?: SummaryColumns },
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
      this.output.out(wrapSummary(summaryLine(event.summary, this.#tally.told), this.options.summaryColumns));
      return;
    }
    const line = errorLine(event);
    if (line) this.output.err(line);
  };

  /** The run's journal as this view folded it: its counts and money are the report's. */
  get fold(): RunFold {
    return this.#tally.fold;
  }

  /** `progress: 120/500 done (3 failed), 20 in flight, committed US$6.00, ETA 2m10s` */
  line(): string {
    let done = 0;
    let failed = 0;
    let unknown = 0;
    let inFlight = 0;
    let before = 0;
    for (const id of this.#tally.stepIds()) {
      const s = this.#tally.step(id);
      done += s.done;
      failed += s.failed;
      unknown += s.unknown;
      inFlight += s.inFlight;
      before += s.before;
    }
    const finished = done + failed + unknown;
    const eta = etaText(finished - before, this.#tally.total - before, this.#tally.startedAt, this.#tally.now());
    const unknownText = unknown === 0 ? '' : `, ${unknown} unknown`;
    return `progress: ${finished}/${this.#tally.total} done (${failed} failed${unknownText}), ${inFlight} in flight, ${this.#tally.committedText()}, ETA ${eta}`;
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
    // The journal holds those records already: a log of them would say each a second time.
    if (event.type === 'instance_journaled') return;
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
  /** The line under the bars with the run's spend. */
  readonly #spend: cliProgress.SingleBar;
  #stopped = false;

  constructor(
    private readonly output: Output,
    private readonly options: {
      quiet: boolean;
      steps: readonly { id: string; count: number }[];
      stream?: NodeJS.WritableStream;
      now?: () => number;
      summaryColumns?: SummaryColumns;
    },
  ) {
    this.#tally = new Tally(options.now ?? Date.now);
    const layout: BarLayout = {
      stepWidth: Math.max(...options.steps.map((s) => s.id.length), 4),
      digits: Math.max(...options.steps.map((s) => String(Math.max(s.count, 1)).length)),
    };
    this.#multi = new cliProgress.MultiBar(
      {
        // Laid out for the terminal's width at each redraw (barLine), so a resize is followed too.
        // Our own ETA: cli-progress's shows NULL or INF until it has a pace, and counts submits as progress.
        format: (_options, params, payload) =>
          payload.step === undefined
            ? spendLine(params.maxWidth, String(payload.spend))
            : barLine(
                params.maxWidth,
                {
                  step: String(payload.step),
                  done: params.value,
                  total: params.total,
                  failed: Number(payload.failed),
                  inFlight: Number(payload.inflight),
                  eta: String(payload.time_left),
                },
                layout,
              ),
        hideCursor: true,
        // Every bar redrawn at each frame: after a logged line the bars move down a row, and a bar
        // drawn only when its text changed would leave the row's old text there.
        forceRedraw: true,
        clearOnComplete: false,
        stopOnComplete: false,
        fps: 5,
        ...(options.stream ? { stream: options.stream } : {}),
      },
      cliProgress.Presets.legacy,
    );
    for (const step of options.steps) {
      this.#bars.set(step.id, this.#multi.create(Math.max(step.count, 1), 0, { step: step.id, failed: 0, inflight: 0, time_left: '--' }));
    }
    this.#spend = this.#multi.create(1, 0, { spend: this.#spendText() });
  }

  readonly listener: RunListener = (event) => {
    this.#tally.on(event);
    if (event.type === 'run_finished') {
      this.stop();
      // Wrapped here, at spaces: a terminal wraps a long line mid-word.
      this.output.out(wrapSummary(summaryLine(event.summary, this.#tally.told), this.options.summaryColumns));
      return;
    }
    const line = errorLine(event);
    // Wrapped too: the bars turn the terminal's wrapping off, which would cut a long line.
    // Each line after the first is cleared as it is written (cli-progress clears the first only).
    if (line) this.#multi.log(`${wrapWords(line, this.#columns()).replaceAll('\n', '\n\u001b[2K')}\n`);
    if ('step' in event) this.#render(event.step);
    this.#spend.update({ spend: this.#spendText() });
  };

  /** The run's journal as this view folded it: its counts and money are the report's. */
  get fold(): RunFold {
    return this.#tally.fold;
  }

  #columns(): number {
    return (this.options.stream as { columns?: number } | undefined)?.columns ?? process.stderr.columns ?? 80;
  }

  #render(stepId: string): void {
    const bar = this.#bars.get(stepId);
    if (!bar) return;
    const s = this.#tally.step(stepId);
    const finished = ended(s);
    bar.update(finished, {
      failed: s.failed,
      inflight: s.inFlight,
      time_left: etaText(finished - s.before, bar.getTotal() - s.before, s.startedAt, this.#tally.now()),
    });
  }

  /** Committed, the budget's measure: charged, in flight and unknown, not the report's net. */
  #spendText(): string {
    return this.#tally.committedText();
  }

  /** Once: a second stop would move the cursor up over what was printed after the bars (the summary) and draw them there again. */
  stop(): void {
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
    steps: readonly { id: string; count: number }[];
    intervalMs?: number;
  },
): ProgressSink {
  if (options.jsonLogs) return new JsonLogs(output, options);
  if (options.tty && !options.quiet) return new TtyProgress(output, options);
  return new LineProgress(output, options);
}
