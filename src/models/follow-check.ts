/**
 * Is the service's answer about the submission being followed? A resume follows
 * the request ids its journal holds; a service that lost them and hands them out again (an emulator
 * restarted with the same seed, a deploy), or a proxy that mixes answers up, can answer about
 * another job, whose output must never become this instance's. The checks go as far as the answers
 * allow (spec §2.1, §2.7):
 *
 * - a RequestStatus echoes `request_id`, and its `status_url` and `cancel_url` name the request
 *   (`/requests/{id}/status`, `/requests/{id}/cancel`);
 * - a job set echoes its `id`, its `type` (the model family), and the `input_params` it was created
 *   with, which are compared with the body sent when the caller knows it.
 *
 * A mismatch throws FollowMismatchError (code `mismatch`): the attempt's fate is unknown, and the
 * instance is left unknown rather than completed with a foreign output.
 */
import type { AdapterContext } from './adapter.js';
import { FollowMismatchError } from '../api/errors.js';
import type { JobSet, RequestStatus } from '../api/wire.js';
import { oneLine } from '../util/terminal-text.js';

/** The body the submission was sent with, when the caller passed it (AdapterContext.sentBody); without it the input_params check is skipped. */
export const sentBodyOf = (ctx: AdapterContext): unknown => ctx.sentBody;

/** A value from the service, shown in one short line of a message. */
function shown(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  const line = oneLine(text);
  return line.length > 80 ? `${line.slice(0, 77)}...` : line;
}

/** A status or cancel URL's path: `.../requests/{id}/status` (or `/cancel`). Compiled once: this runs for every status answer. */
const REQUEST_URL_PATH = { status: /\/requests\/([^/]+)\/status\/?$/, cancel: /\/requests\/([^/]+)\/cancel\/?$/ } as const;

/** The id a status or cancel URL names (`.../requests/{id}/status`), or undefined when it has another shape. */
function requestIdInUrl(url: string, action: 'status' | 'cancel'): string | undefined {
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return undefined;
  }
  const match = REQUEST_URL_PATH[action].exec(path);
  if (!match) return undefined;
  try {
    return decodeURIComponent(match[1] as string);
  } catch {
    return match[1];
  }
}

/** Throws FollowMismatchError when `status` is not about `requestId`. */
export function checkRequestFollow(requestId: string, status: RequestStatus): void {
  const mismatch = (field: string, returned: string): FollowMismatchError =>
    new FollowMismatchError({ what: 'request', followed: requestId, field, expected: requestId, returned: shown(returned) });
  // Ids are uuids (the schema checks the answer's): compared without regard to case.
  const same = (id: string): boolean => id.toLowerCase() === requestId.toLowerCase();
  if (!same(status.request_id)) throw mismatch('request_id', status.request_id);
  for (const [field, action] of [
    ['status_url', 'status'],
    ['cancel_url', 'cancel'],
  ] as const) {
    const url = status[field];
    if (url === undefined) continue;
    const named = requestIdInUrl(url, action);
    if (named !== undefined && !same(named)) throw mismatch(field, url);
  }
}

/** JSON with object keys sorted: two bodies equal as JSON compare equal whatever their key order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * Throws FollowMismatchError when `set` is not the job set `jobSetId`: another id, a `type` other
 * than `expected.type` (when given), or `input_params` that disagree with `expected.sentParams`
 * (when given). Only members both hold, with a plain value (text, number, boolean, null), are
 * compared: a service may add defaults, leave out what it ignores, or host a copy of an input image
 * and echo its own URL, but a seed or a prompt echoed with another value is another job.
 */
export function checkJobSetFollow(jobSetId: string, set: JobSet, expected: { type?: string | undefined; sentParams?: unknown } = {}): void {
  const mismatch = (field: string, want: string, returned: unknown): FollowMismatchError =>
    new FollowMismatchError({ what: 'job set', followed: jobSetId, field, expected: want, returned: shown(returned) });
  if (set.id.toLowerCase() !== jobSetId.toLowerCase()) throw mismatch('id', jobSetId, set.id);
  if (expected.type !== undefined && set.type !== expected.type) throw mismatch('type', expected.type, set.type);
  const sent = expected.sentParams;
  if (sent === null || typeof sent !== 'object' || Array.isArray(sent)) return;
  for (const [key, value] of Object.entries(sent as Record<string, unknown>)) {
    if (value === undefined || (value !== null && typeof value === 'object') || !Object.hasOwn(set.input_params, key)) continue;
    const echoed = set.input_params[key];
    if (canonical(echoed) !== canonical(value)) throw mismatch(`input_params.${key}`, shown(canonical(value)), canonical(echoed));
  }
}
