/**
 * What a run's end notification says: genpipe's JSON summary (pipeline, run id, outcome, a
 * message, counts, spend, the host and the file:// URLs of the gallery and the report), or that
 * summary as a Slack or Discord incoming webhook message. Built from the run's summary and its
 * cost report only: no credential, input or output URL is in it.
 *
 * The gallery and report are files on the runner's disk. The JSON summary gives them as file://
 * URLs with the host they are on (a hook on that host, or on shared storage, can open them); the
 * chat messages, read on other machines where such a link opens nothing, name the run directory
 * and host instead, with the command that serves the gallery (`genpipe review`).
 */
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { CostSummary } from '../report/cost-report.js';
import { formatBytes } from '../util/format-bytes.js';
import { outcomeWord, type RunCounts, type RunOutcome } from '../run/events.js';
import type { NotifyEvent, NotifyFormat } from './notify-targets.js';
import { formatSpend, formatUsd, jsonUsd } from '../util/format-usd.js';

export interface RunEnd {
  pipeline: string;
  runId: string;
  runDir: string;
  /** The runner's outcome, or `failed` when the run stopped on an error. */
  outcome: RunOutcome;
  exitCode: number;
  /** The sentence that explains a stop. */
  message?: string | undefined;
  counts: RunCounts;
  durationMs: number;
  /** CSV rows set aside as invalid (`on_invalid: skip`): not run, so not in the counts. */
  skippedRows?: number | undefined;
}

/** The event a run's end is: a clean finish, a failure or stop, the budget, or Ctrl-C / SIGTERM. */
export function eventOf(outcome: RunOutcome): NotifyEvent {
  switch (outcome) {
    case 'completed':
      return 'finish';
    case 'budget':
      return 'budget';
    case 'aborted':
      return 'interrupted';
    default:
      return 'failure';
  }
}

export interface NotifySummary {
  event: NotifyEvent;
  pipeline: string;
  run_id: string;
  /** The outcome as people read it: a run stopped by a signal is `interrupted` (the journal's `aborted`). */
  outcome: string;
  exit_code: number;
  /** The sentence that explains a stop, or says how a run finished: always present. */
  message: string;
  counts: RunCounts;
  /** CSV rows set aside as invalid before the run (report.md lists them); present when there were some. */
  skipped_rows?: number;
  /** `unknown`: attempts whose end is unknown, at their price; `unpriced_instances`: not in these sums. */
  spend_usd: { estimated: number; refunded: number; net: number; unknown: number; unpriced_instances: number };
  duration_s: number;
  run_dir: string;
  /** The host the run directory is on. */
  host: string;
  /** file:// URL of the run's gallery.html, on `host`. */
  gallery: string;
  /** file:// URL of the run's report.md, on `host`. */
  report: string;
  /**
   * The run's storage sinks, when a step has one: the files uploaded and still pending,
   * and where they are: `s3://` URIs, and the public URL of each prefix that has one (a link that
   * opens on any machine, unlike `gallery`).
   */
  sink?: {
    uploaded_files: number;
    uploaded_bytes: number;
    pending_files: number;
    pending_bytes: number;
    /** Outputs another object at their key kept out (nothing overwritten: the run exits 1), and those kept out on purpose (`on_conflict: skip`). */
    conflict_files: number;
    skipped_files: number;
    /** Uploads whose bytes in the store could not be checked. */
    unverified_files: number;
    /** The first NAMED of each: the object and why (report.md lists more, report.json every one). */
    conflicts: { instance: string; uri: string; reason: string }[];
    unverified: { instance: string; uri: string; reason: string }[];
    locations: { uri: string; public_url?: string }[];
  };
}

/** Conflicts and unverified uploads a notification names, of each kind. */
const NAMED = 10;

export function notifySummary(
  end: RunEnd,
  report: Pick<CostSummary, 'total' | 'sink'> | undefined,
  host: string = hostname(),
): NotifySummary {
  const total = report?.total;
  const runDir = resolve(end.runDir);
  const sink = report?.sink;
  return {
    event: eventOf(end.outcome),
    pipeline: end.pipeline,
    run_id: end.runId,
    outcome: outcomeWord(end.outcome),
    exit_code: end.exitCode,
    message: end.message ?? endSentence(end),
    counts: end.counts,
    ...(end.skippedRows ? { skipped_rows: end.skippedRows } : {}),
    spend_usd: {
      estimated: jsonUsd(total?.estimatedUsd ?? 0),
      refunded: jsonUsd(total?.refundedUsd ?? 0),
      net: jsonUsd(total?.netUsd ?? 0),
      unknown: jsonUsd(total?.unknownUsd ?? 0),
      unpriced_instances: total?.unpricedInstances ?? 0,
    },
    duration_s: Math.round(end.durationMs / 100) / 10,
    run_dir: runDir,
    host,
    gallery: pathToFileURL(`${runDir}/gallery.html`).href,
    report: pathToFileURL(`${runDir}/report.md`).href,
    ...(sink
      ? {
          sink: {
            uploaded_files: sink.uploadedFiles,
            uploaded_bytes: sink.uploadedBytes,
            pending_files: sink.pendingFiles,
            pending_bytes: sink.pendingBytes,
            conflict_files: sink.conflictFiles,
            skipped_files: sink.skippedFiles,
            unverified_files: sink.unverifiedFiles,
            conflicts: sink.conflicts.slice(0, NAMED),
            unverified: sink.unverified.slice(0, NAMED),
            locations: sink.locations.map((l) => (l.public_url === undefined ? { uri: l.uri } : { uri: l.uri, public_url: l.public_url })),
          },
        }
      : {}),
  };
}

/** "Outputs: 40 files (12.3 MB) in s3://b/p, public at https://cdn/p; 2 uploads pending." */
function sinkLine(sink: NonNullable<NotifySummary['sink']>): string {
  const where = sink.locations.map((l) => (l.public_url === undefined ? l.uri : `${l.uri}, public at ${l.public_url}`)).join('; ');
  const n = (k: number): string => `${k.toLocaleString('en-US')} file${k === 1 ? '' : 's'}`;
  const pending =
    sink.pending_files === 0
      ? ''
      : `; ${n(sink.pending_files)} (${formatBytes(sink.pending_bytes)}) pending upload (genpipe resume uploads them)`;
  return [
    `Outputs: ${n(sink.uploaded_files)} (${formatBytes(sink.uploaded_bytes)}) in ${where}${pending}.`,
    ...noteLine(
      `Not uploaded, another object at the key (not overwritten): ${n(sink.conflict_files + sink.skipped_files)}`,
      sink.conflicts,
    ),
    ...noteLine(`Unverified uploads: ${n(sink.unverified_files)}`, sink.unverified),
  ].join('\n');
}

/** A line naming the first few objects of a kind, or none when there are none. */
function noteLine(head: string, notes: NonNullable<NotifySummary['sink']>['conflicts']): string[] {
  if (notes.length === 0) return [];
  const shown = notes.slice(0, 5).map((note) => `${note.uri} (${note.reason})`);
  return [`${head}: ${shown.join('; ')}${notes.length > shown.length ? '; report.md lists the others' : ''}.`];
}

/** A run's end in one sentence when the runner gave none (a clean finish, mostly). */
function endSentence(end: RunEnd): string {
  const { completed, failed, reused } = end.counts;
  const instances = (n: number): string => `${n.toLocaleString('en-US')} instance${n === 1 ? '' : 's'}`;
  if (end.outcome === 'completed') {
    const skipped = end.skippedRows
      ? `; ${end.skippedRows.toLocaleString('en-US')} CSV row${end.skippedRows === 1 ? ' was' : 's were'} skipped as invalid`
      : '';
    return `All ${instances(completed)} completed${reused > 0 ? ` (${reused.toLocaleString('en-US')} reused from an earlier run)` : ''}${skipped}.`;
  }
  const how: Record<Exclude<RunOutcome, 'completed'>, string> = {
    failed: 'failed',
    budget: 'stopped at its budget',
    aborted: 'was interrupted',
    stopped: 'stopped',
  };
  return `The run ${how[end.outcome]}: ${instances(completed)} completed, ${failed.toLocaleString('en-US')} failed.`;
}

const HEADLINE: Record<NotifyEvent, string> = {
  finish: 'finished',
  failure: 'failed',
  budget: 'stopped at its budget',
  interrupted: 'was interrupted',
};

const usd = (n: number): string => formatUsd(n, 'total');

/** One line per fact, plain text: the body of the Slack and Discord messages. */
export function summaryText(s: NotifySummary): string {
  const counts = Object.entries(s.counts)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${n.toLocaleString('en-US')} ${k}`)
    .join(', ');
  return [
    `genpipe: ${s.pipeline} run ${s.run_id} ${HEADLINE[s.event]} (exit ${s.exit_code}) after ${s.duration_s} s.`,
    s.message,
    `Instances: ${counts || 'none'}.`,
    ...(s.skipped_rows
      ? [
          `Skipped: ${s.skipped_rows.toLocaleString('en-US')} CSV row${s.skipped_rows === 1 ? '' : 's'} set aside as invalid, not run (report.md lists them).`,
        ]
      : []),
    ...(s.sink ? [sinkLine(s.sink)] : []),
    `Spend: ${formatSpend({ netUsd: s.spend_usd.net, unknownUsd: s.spend_usd.unknown, unpricedInstances: s.spend_usd.unpriced_instances })} net (${formatSpend({ netUsd: s.spend_usd.estimated, unpricedInstances: s.spend_usd.unpriced_instances })} charged, ${usd(s.spend_usd.refunded)} refunded).`,
    // A chat reader is on another machine, where a path or file:// link opens nothing.
    `Run directory: ${s.run_dir} on ${s.host} (genpipe review ${s.run_dir} serves its gallery).`,
  ].join('\n');
}

/** Discord refuses a message over 2,000 characters; Slack truncates long ones. */
const MAX_TEXT = 1_900;

/**
 * The summary's text as a chat shows it literally. Any part of it may come from a CSV cell (an
 * instance id in a stop message, a pipeline's folder) and must not become markup there: Slack reads
 * `<!channel>` as a mention of everyone and `<https://…|label>` as a link under a label of the
 * sender's choosing, so `&`, `<` and `>` are written as entities (Slack's own escaping); Discord
 * reads markdown, `[label](https://…)` among it, so its punctuation is escaped with a backslash,
 * which it shows as the bare character (a URL is left whole). genpipe builds no link, label or mention of its own: a
 * URL in the text is shown as itself.
 */
export function chatText(format: 'slack' | 'discord', text: string): string {
  if (format === 'slack') return text.replace(/[&<>]/g, (c) => SLACK_ENTITIES[c] as string);
  // A URL is kept whole so that Discord still links it (a backslash inside would break it); the
  // brackets and parentheses around it are escaped, so no text can become its label.
  return text
    .split(URL_TOKEN)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/[\\*_~`|[\]()<>#@]/g, '\\$&')))
    .join('');
}

/** An http(s) URL as Discord links it by itself, in a capturing group (split keeps it). */
const URL_TOKEN = /(https?:\/\/[^\s<>[\]()|`\\]+)/;

const SLACK_ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;' };

/** `text` cut to `max` characters with an ellipsis, never inside an escape (a half entity, a lone backslash). */
function clipChat(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = text.slice(0, max - 1).replace(/&[a-z]*$/, '');
  // An odd run of backslashes at the end ends with half an escape.
  if ((/\\*$/.exec(cut)?.[0].length ?? 0) % 2 === 1) cut = cut.slice(0, -1);
  return `${cut}…`;
}

/** The request body for a format. */
export function notifyBody(format: NotifyFormat, summary: NotifySummary): string {
  if (format === 'json') return JSON.stringify(summary);
  const text = clipChat(chatText(format, summaryText(summary)), MAX_TEXT);
  // Slack: no @name is turned into a mention. Discord: no mention of any kind notifies anyone.
  return JSON.stringify(format === 'slack' ? { text, link_names: false } : { content: text, allowed_mentions: { parse: [] } });
}
