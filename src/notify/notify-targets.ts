/**
 * Where a run's end is posted: the manifest's `notify:` entries and each `--notify URL`, checked
 * before the run starts (so a bad one exits 2 with nothing sent). A webhook URL is a secret (a
 * Slack or Discord URL is its own credential): it is registered for redaction, and every message,
 * journal record and log names it only by its origin (`https://hooks.slack.com/…`).
 */
import { GenpipeError } from '../api/errors.js';
import { ManifestError } from '../manifest/errors.js';
import type { LoadedManifest } from '../manifest/load.js';
import { NOTIFY_EVENTS, type NotifyTarget } from '../manifest/schema.js';
import { registerSecret } from '../util/redact.js';
import { formatPath } from '../util/zod-issues.js';

export type NotifyEvent = (typeof NOTIFY_EVENTS)[number];
export type NotifyFormat = NonNullable<NotifyTarget['format']>;

/** At most this many places, manifest and flags together. */
export const MAX_NOTIFY_TARGETS = 10;

export interface ResolvedTarget {
  url: string;
  /** The URL as messages may name it: its origin and `/…`. */
  label: string;
  events: ReadonlySet<NotifyEvent>;
  format: NotifyFormat;
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** `https://hooks.slack.com/…`: what a URL may be called by anywhere it is written. */
export function redactedUrl(url: URL): string {
  return `${url.protocol}//${url.host}/…`;
}

/**
 * Checks a notification URL: https anywhere, plain http only to this machine (the summary could
 * cross a network in the clear otherwise). Returns the problem as a sentence, or the parsed URL.
 */
export function checkNotifyUrl(text: string): URL | string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'is not a URL';
  }
  if (url.username !== '' || url.password !== '')
    return `${redactedUrl(url)} carries a user name or password: put the credential in the URL's path or query, as Slack and Discord do`;
  if (url.protocol === 'https:') return url;
  if (url.protocol === 'http:') {
    if (LOOPBACK_HOSTS.has(url.hostname)) return url;
    return `${redactedUrl(url)} is refused: plain http is allowed only to 127.0.0.1, ::1 or localhost; use https`;
  }
  return `${redactedUrl(url)} is refused: a notification URL starts with https://`;
}

/**
 * The run's notification targets: the manifest's, then one per `--notify URL` (json, every event).
 * Throws exit 2 (a ManifestError located in the manifest, or a flag's sentence) when one is bad.
 */
export function resolveNotifyTargets(
  loaded: Pick<LoadedManifest, 'manifest' | 'source'>,
  flagUrls: readonly string[],
  env: NodeJS.ProcessEnv,
  options: { /** `genpipe validate`: a url_env that is unset here may be set where the run happens. */ allowUnsetEnv?: boolean } = {},
): ResolvedTarget[] {
  const entries = loaded.manifest.notify ?? [];
  if (entries.length + flagUrls.length > MAX_NOTIFY_TARGETS) {
    throw new GenpipeError(
      'invalid_input',
      `A run notifies at most ${MAX_NOTIFY_TARGETS} places; the manifest names ${entries.length} and --notify ${flagUrls.length}.`,
    );
  }
  const targets: ResolvedTarget[] = [];
  const problems: { path: (string | number)[]; message: string }[] = [];
  entries.forEach((entry, i) => {
    let text = entry.url;
    if (entry.url_env !== undefined) {
      text = env[entry.url_env];
      if (text === undefined || text === '') {
        if (options.allowUnsetEnv) return;
        problems.push({
          path: ['notify', i, 'url_env'],
          message: `the environment variable ${entry.url_env} is not set (it should hold the notification URL)`,
        });
        return;
      }
    }
    const checked = checkNotifyUrl(text ?? '');
    if (typeof checked === 'string') {
      problems.push({
        path: ['notify', i, entry.url_env === undefined ? 'url' : 'url_env'],
        message: entry.url_env === undefined ? `the URL ${checked}` : `the URL in ${entry.url_env} ${checked}`,
      });
      return;
    }
    targets.push(target(checked, entry.on ?? NOTIFY_EVENTS, entry.format ?? 'json'));
  });
  if (problems.length > 0) {
    throw new ManifestError(
      problems.map((p) => ({ location: loaded.source.locate(p.path), path: formatPath(p.path), message: p.message })),
    );
  }
  for (const text of flagUrls) {
    const checked = checkNotifyUrl(text);
    if (typeof checked === 'string') throw new GenpipeError('invalid_input', `--notify: the URL ${checked}.`);
    targets.push(target(checked, NOTIFY_EVENTS, 'json'));
  }
  return targets;
}

function target(url: URL, events: readonly NotifyEvent[], format: NotifyFormat): ResolvedTarget {
  // The whole URL, and its path and query alone, never reach a log, a journal or a report.
  registerSecret(url.href);
  if (url.pathname.length > 8) registerSecret(url.pathname);
  if (url.search.length > 8) registerSecret(url.search.slice(1));
  return { url: url.href, label: redactedUrl(url), events: new Set(events), format };
}
