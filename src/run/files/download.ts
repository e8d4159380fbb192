/**
 * Downloads one output into the run directory (reliability.md #16, #17).
 *
 * - https only; plain http only to loopback (127.0.0.0/8, ::1, localhost: the emulator). The URL
 *   is checked before any connection is made.
 * - An address inside the machine or the local network (loopback, link-local, private ranges,
 *   unspecified; written as an IP address or `localhost`) is refused unless the URL has the origin
 *   of one of the service's addresses: an output URL `http://127.0.0.1:<another port>/admin` (from
 *   a remote service, even) must not make genpipe send requests to another local service. Each hop
 *   of a redirect is checked the same way. Host names are not resolved here: the rule is about the
 *   addresses a URL names. The client's dispatcher applies the same rule to the address a name
 *   resolves to, when it connects (api/connect-guard.ts); its refusal fails the download the same
 *   way (`internal_address`).
 * - Redirects are followed by hand, at most `maxRedirects`, and only within the same origin
 *   (scheme, host and port): a CDN that bounces to another host could point anywhere.
 * - The content type must be on the allow-list; the size is capped (by Content-Length up front,
 *   and while streaming, since a server may lie or send none).
 * - Bytes stream into a temp file in the target's directory while sha256 is computed; the file is
 *   fsynced, then linked into place and the directory fsynced, so a crash leaves either no file or
 *   the whole file, never a partial one under the final name.
 * - An existing file is never overwritten. `link` fails atomically when the name exists (a
 *   check-then-rename would race). When the existing file has the same sha256 the download counts
 *   as done (`alreadyPresent`): that is the crash between the rename and the journal record, and
 *   the resumed run must get past it. Different bytes are refused.
 */
import { crashPoint } from '../attempt/crash-points.js';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { link, lstat, mkdir, open, realpath, rename, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { request, type Dispatcher } from 'undici';
import { errorFromStatus, GenpipeError, InternalAddressError, type ErrorCode } from '../../api/errors.js';
import { classifyTransportError, outcomeErrorCode } from '../../api/retry.js';
import { readBody } from '../../api/read-body.js';
import { abortError } from '../../api/sleep.js';
import { redact } from '../../util/redact.js';
import { isInside, resolveInside } from './output-names.js';
import { syncDirectory } from './sync-directory.js';
import { isLoopbackHost } from '../../util/loopback-host.js';
import { serviceOriginsOf } from '../../api/service-origins.js';
import { isInternalAddress } from '../../util/internal-address.js';
import { IMAGE_HEADER_BYTES, imageSizeOfHeader, type ImageSize } from '../../util/image-size.js';

export const DEFAULT_MAX_REDIRECTS = 3;
/** Downloaded bytes are written to the temp file in batches of about this size. */
const WRITE_BATCH_BYTES = 1024 * 1024;

export type DownloadRefusal =
  | 'insecure_url' // not https, and not http to loopback
  | 'internal_address' // loopback, link-local or private, and not the service's origin
  | 'cross_origin_redirect'
  | 'too_many_redirects'
  | 'content_type'
  | 'too_large'
  | 'exists' // a different file already has the name
  | 'unsafe_path'; // the target would land outside the run directory

/** A download refused by one of the rules above; `reason` says which. */
export class DownloadError extends GenpipeError {
  override readonly name = 'DownloadError';
  readonly reason: DownloadRefusal;
  constructor(reason: DownloadRefusal, code: ErrorCode, message: string) {
    super(code, message);
    this.reason = reason;
  }
}

export interface DownloadOptions {
  url: string;
  /** The run directory; the file lands at `runDir/relativePath`. */
  runDir: string;
  /** Chosen by genpipe (see `safeFileName`), never taken from the URL. */
  relativePath: string;
  /** Largest accepted body, in bytes. */
  maxBytes: number;
  /** Media types such as `image/png`, or ranges: `image/*`, or star-slash-star for any type; parameters (`; charset=`) are ignored. */
  allowedContentTypes: readonly string[];
  dispatcher?: Dispatcher;
  signal?: AbortSignal;
  /**
   * Origins (`http://127.0.0.1:4010`) whose URLs may be on a loopback, link-local or private
   * address: the service's. Default: those the client owning `dispatcher` recorded
   * (api/service-origins.ts); with neither, no such address is allowed.
   */
  allowedOrigins?: readonly string[];
  /** Default 3. */
  maxRedirects?: number;
  /** Default 30,000 ms each (undici's own default is 300 s). */
  headersTimeoutMs?: number;
  bodyTimeoutMs?: number;
}

export interface DownloadResult {
  /** Absolute path of the file. */
  path: string;
  /** The path relative to the run directory, with `/` separators (what the journal records). */
  relativePath: string;
  sha256: string;
  size: number;
  contentType: string;
  /** The same bytes were already there (a resumed run); nothing was written. */
  alreadyPresent: boolean;
  /** An image's width and height, from its first bytes, for the formats image-size.ts reads. */
  imageSize?: ImageSize | undefined;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** Refuses a URL that is not https, unless it is plain http to loopback. */
export function checkDownloadUrl(url: URL): void {
  if (url.protocol === 'https:') return;
  if (url.protocol === 'http:' && isLoopbackHost(url.hostname)) return;
  throw new DownloadError(
    'insecure_url',
    'invalid_input',
    `Refusing to download ${describe(url)}: only https is allowed (plain http only to loopback).`,
  );
}

/** True when `hostname` (a URL's) names an address inside the machine or the local network. */
export function isInternalHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  return isInternalAddress(host);
}

/** Refuses a URL on an internal address unless its origin is one of `allowed` (the service's). */
export function checkDownloadAddress(url: URL, allowed: ReadonlySet<string> | undefined): void {
  if (!isInternalHost(url.hostname) || allowed?.has(url.origin)) return;
  throw new DownloadError(
    'internal_address',
    'invalid_response',
    `Refusing to download ${describe(url)}: it is on a local or private address that is not the service's (base_url, platform_url or cdn_url); nothing was requested there.`,
  );
}

/** The URL without query or fragment, which may carry signed tokens, for messages. */
function describe(url: URL): string {
  return redact(`${url.protocol}//${url.host}${url.pathname}`);
}

function mediaType(header: string | string[] | undefined): string | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  const type = value?.split(';')[0]?.trim().toLowerCase();
  return type === '' ? undefined : type;
}

// Matches a media type against an allow-list of `type/subtype`, `type/*` and `*/*` (RFC 9110 media
// ranges), part by part. A prefix test got `*/*` wrong (it looked for the prefix `*/`, matching
// nothing), and the runner passes `*/*` for every output without an accept list.
function contentTypeAllowed(type: string, allowed: readonly string[]): boolean {
  const [kind, subtype, ...rest] = type.split('/');
  if (!kind || !subtype || rest.length > 0) return false;
  return allowed.some((entry) => {
    const [wantKind, wantSubtype, ...extra] = entry.trim().toLowerCase().split('/');
    if (!wantKind || !wantSubtype || extra.length > 0) return false;
    if (wantKind === '*') return wantSubtype === '*';
    return wantKind === kind && (wantSubtype === '*' || wantSubtype === subtype);
  });
}

/** Downloads `url` to `runDir/relativePath` under the rules of the header comment. */
export async function downloadToFile(options: DownloadOptions): Promise<DownloadResult> {
  const { signal } = options;
  if (signal?.aborted) throw abortError(signal);
  let target: string;
  try {
    target = resolveInside(options.runDir, options.relativePath);
  } catch (error) {
    throw new DownloadError('unsafe_path', 'invalid_input', (error as Error).message);
  }
  const first = new URL(options.url);
  checkDownloadUrl(first);
  const allowed =
    options.allowedOrigins !== undefined
      ? new Set(options.allowedOrigins.map((o) => new URL(o).origin))
      : options.dispatcher && serviceOriginsOf(options.dispatcher);
  checkDownloadAddress(first, allowed);

  const folder = dirname(target);
  await prepareFolder(options.runDir, folder);

  const response = await fetchFollowingSameOrigin(first, options, allowed);
  const body = response.body;
  let temp: string | undefined;
  let handle: FileHandle | undefined;
  try {
    const contentType = mediaType(response.headers['content-type']);
    if (contentType === undefined || !contentTypeAllowed(contentType, options.allowedContentTypes)) {
      throw new DownloadError(
        'content_type',
        'invalid_response',
        `Refusing ${describe(first)}: content type ${contentType ?? '(none)'} is not one of ${options.allowedContentTypes.join(', ')}.`,
      );
    }
    const declared = Number(response.headers['content-length']);
    if (Number.isFinite(declared) && declared > options.maxBytes) throw tooLarge(first, options.maxBytes);

    temp = join(folder, nextTempName());
    handle = await openTemp(options.runDir, folder, temp);
    const file = handle;
    const hash = createHash('sha256');
    // Chunks are hashed as they come and written in batches: a small output is one write.
    let batch: Buffer[] = [];
    let batched = 0;
    // The first bytes, for the image's size (the gallery then need not open the file to learn it).
    let head: Buffer | undefined;
    // Each write starts after the one before, whatever the stream does: the file's bytes stay in the hashed order.
    let writing = Promise.resolve();
    const writeBatch = (): Promise<void> => {
      const bytes = batch.length === 1 ? (batch[0] as Buffer) : Buffer.concat(batch, batched);
      batch = [];
      batched = 0;
      writing = writing.then(async () => {
        await writeAll(file, bytes);
        crashPoint('mid_download');
      });
      return writing;
    };
    const size = await readBody(body, {
      maxBytes: options.maxBytes,
      tooLarge: () => tooLarge(first, options.maxBytes),
      onChunk: (chunk) => {
        hash.update(chunk);
        if (head === undefined || head.length < IMAGE_HEADER_BYTES) head = head === undefined ? chunk : Buffer.concat([head, chunk]);
        batch.push(chunk);
        batched += chunk.length;
        return batched >= WRITE_BATCH_BYTES ? writeBatch() : undefined;
      },
    });
    if (batched > 0) await writeBatch();
    // fdatasync: the bytes and the size, without the timestamps a full fsync would also write.
    await handle.datasync();
    await handle.close();
    handle = undefined;
    const sha256 = hash.digest('hex');
    const alreadyPresent = await placeWithoutOverwrite(temp, target, sha256);
    temp = undefined;
    if (!alreadyPresent) await syncDirectory(folder);
    const imageSize = head && imageSizeOfHeader(head);
    return {
      path: target,
      relativePath: relative(resolve(options.runDir), target).split(sep).join('/'),
      sha256,
      size,
      contentType,
      alreadyPresent,
      ...(imageSize ? { imageSize } : {}),
    };
  } catch (error) {
    // Close the connection rather than drain a body we refuse; undici reports that as an error event.
    body.on('error', () => undefined).destroy();
    throw translate(error, signal);
  } finally {
    await handle?.close().catch(() => undefined);
    if (temp !== undefined) await unlink(temp).catch(() => undefined);
  }
}

/**
 * Writes text genpipe received (an agent's answer) as an output file, with the guarantees of a
 * download: inside the run directory, synced temp file linked into place, never overwriting other
 * bytes, the directory synced; the same bytes already there count as done.
 */
export async function writeTextOutput(options: {
  runDir: string;
  relativePath: string;
  text: string;
}): Promise<Omit<DownloadResult, 'contentType'>> {
  let target: string;
  try {
    target = resolveInside(options.runDir, options.relativePath);
  } catch (error) {
    throw new DownloadError('unsafe_path', 'invalid_input', (error as Error).message);
  }
  const folder = dirname(target);
  await prepareFolder(options.runDir, folder);
  const bytes = Buffer.from(options.text, 'utf8');
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  let temp: string | undefined = join(folder, nextTempName());
  let handle: FileHandle | undefined;
  try {
    handle = await openTemp(options.runDir, folder, temp);
    await writeAll(handle, bytes);
    await handle.datasync();
    await handle.close();
    handle = undefined;
    const alreadyPresent = await placeWithoutOverwrite(temp, target, sha256);
    temp = undefined;
    if (!alreadyPresent) await syncDirectory(folder);
    return {
      path: target,
      relativePath: relative(resolve(options.runDir), target).split(sep).join('/'),
      sha256,
      size: bytes.length,
      alreadyPresent,
    };
  } finally {
    await handle?.close().catch(() => undefined);
    if (temp !== undefined) await unlink(temp).catch(() => undefined);
  }
}

/**
 * Folders already created and checked, by run directory: a step's outputs share one folder, so the
 * check runs once per folder and process instead of three filesystem calls per download. Bounded: a
 * run has a folder per step. What the check is for: a run directory (a resumed one, say) whose
 * output folder is a link to somewhere else. A link swapped in while the run is writing is not
 * caught, as it was not before either (it could be swapped between any check and the open).
 */
const preparedFolders = new Map<string, Promise<void>>();
const MAX_PREPARED_FOLDERS = 1_024;

/**
 * Checks that `folder` and everything on the way to it resolve inside the run directory, then
 * creates what is missing. The check comes first: `mkdir -p` through a symlinked `outputs/` (or step
 * folder) would create folders outside before any check could refuse them.
 */
function prepareFolder(runDir: string, folder: string): Promise<void> {
  const key = `${runDir}\0${folder}`;
  let prepared = preparedFolders.get(key);
  if (!prepared) {
    prepared = (async () => {
      const realRoot = await realpath(runDir);
      await checkRealPathInside(runDir, realRoot, await deepestExisting(folder), folder, 'nothing was created');
      await mkdir(folder, { recursive: true });
      // Again on the created folder: catches a link swapped in between (narrowing the race, not closing it).
      await checkRealPathInside(runDir, realRoot, folder, folder, 'nothing was written');
    })();
    if (preparedFolders.size >= MAX_PREPARED_FOLDERS) preparedFolders.clear();
    preparedFolders.set(key, prepared);
    // A failure is not remembered: the next download checks again (and reports it again).
    prepared.catch(() => preparedFolders.delete(key));
  }
  return prepared;
}

/** The deepest of `path` and its ancestors that exists (as any entry, a dangling link included). */
async function deepestExisting(path: string): Promise<string> {
  let probe = path;
  // Bounded: each turn moves one level up, and the filesystem root exists.
  for (;;) {
    try {
      await lstat(probe);
      return probe;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error;
    }
    const parent = dirname(probe);
    if (parent === probe) return probe;
    probe = parent;
  }
}

/** Refuses `existing` (on the way to `folder`) unless its real path is inside the run directory's. */
async function checkRealPathInside(runDir: string, realRoot: string, existing: string, folder: string, consequence: string): Promise<void> {
  const shown = (path: string): string => relative(resolve(runDir), path).split(sep).join('/') || '.';
  let real: string | undefined;
  try {
    real = await realpath(existing);
  } catch (error) {
    // A link to nowhere: following it could create its target, wherever it points.
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  if (real === undefined || !isInside(realRoot, real)) {
    throw new DownloadError(
      'unsafe_path',
      'invalid_input',
      `Refusing to write into ${shown(folder)}: ${shown(existing)} leads outside the run directory (through a symlink); ${consequence}.`,
    );
  }
}

/** Temp names: a random prefix per process and a counter (16 hex digits in all), without a random draw per download. */
const TEMP_PREFIX = randomBytes(4).toString('hex');
let tempCounter = 0;
function nextTempName(): string {
  tempCounter = (tempCounter + 1) >>> 0;
  return `.genpipe-${TEMP_PREFIX}${tempCounter.toString(16).padStart(8, '0')}.part`;
}

/** Opens a new temp file; when the folder went away since it was prepared (deleted by hand), prepares it again. */
async function openTemp(runDir: string, folder: string, temp: string): Promise<FileHandle> {
  try {
    return await open(temp, 'wx', 0o644);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    preparedFolders.delete(`${runDir}\0${folder}`);
    await prepareFolder(runDir, folder);
    return open(temp, 'wx', 0o644);
  }
}

function tooLarge(url: URL, maxBytes: number): DownloadError {
  return new DownloadError('too_large', 'invalid_response', `Refusing ${describe(url)}: it is larger than ${maxBytes} bytes.`);
}

async function writeAll(handle: FileHandle, bytes: Buffer): Promise<void> {
  let offset = 0;
  // Bounded: each turn writes at least one byte, or throws.
  while (offset < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, offset, bytes.length - offset);
    if (bytesWritten <= 0) throw new Error('a download write made no progress');
    offset += bytesWritten;
  }
}

/** Sends the GET and follows up to `maxRedirects` redirects within the first URL's origin. */
async function fetchFollowingSameOrigin(
  first: URL,
  options: DownloadOptions,
  allowed: ReadonlySet<string> | undefined,
): Promise<Dispatcher.ResponseData> {
  const maxRedirects = options.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  let current = first;
  for (let hop = 0; hop <= maxRedirects; hop++) {
    let response: Dispatcher.ResponseData;
    try {
      response = await request(current, {
        method: 'GET',
        headers: { accept: options.allowedContentTypes.join(', ') || '*/*' },
        ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
        signal: options.signal ?? null,
        headersTimeout: options.headersTimeoutMs ?? 30_000,
        bodyTimeout: options.bodyTimeoutMs ?? 30_000,
      });
    } catch (error) {
      if (error instanceof InternalAddressError) {
        throw new DownloadError(
          'internal_address',
          'invalid_response',
          `Refusing to download ${describe(current)}: ${error.hostname === error.address ? 'it is' : `${error.hostname} resolves to ${error.address},`} a local or private address that is not the service's (base_url, platform_url or cdn_url); nothing was requested there.`,
        );
      }
      throw translate(error, options.signal);
    }
    const status = response.statusCode;
    if (status >= 200 && status < 300) return response;
    await response.body.dump().catch(() => undefined);
    const location = response.headers.location;
    if (!REDIRECT_STATUSES.has(status) || typeof location !== 'string') {
      throw errorFromStatus(status, undefined, { endpoint: 'other' });
    }
    const next = new URL(location, current);
    checkDownloadUrl(next);
    if (next.origin !== first.origin) {
      throw new DownloadError(
        'cross_origin_redirect',
        'invalid_response',
        `Refusing the redirect from ${describe(current)} to ${describe(next)}: downloads follow redirects only within the same host.`,
      );
    }
    // Each hop as the first: should the same-origin rule ever loosen, this one still holds.
    checkDownloadAddress(next, allowed);
    current = next;
  }
  throw new DownloadError('too_many_redirects', 'invalid_response', `Refusing ${describe(first)}: more than ${maxRedirects} redirects.`);
}

/**
 * Puts the synced temp file at `target` unless a file is there. Returns true when the same bytes
 * were already there. Always consumes `temp`.
 */
async function placeWithoutOverwrite(temp: string, target: string, sha256: string): Promise<boolean> {
  try {
    await link(temp, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      await unlink(temp);
      return sameFile(target, sha256);
    }
    // A filesystem without hard links: fall back to check-then-rename (racy only against another writer).
    const existing = await lstat(target).catch(() => undefined);
    if (existing !== undefined) {
      await unlink(temp);
      return sameFile(target, sha256);
    }
    await rename(temp, target);
    return false;
  }
  await unlink(temp);
  return false;
}

async function sameFile(target: string, sha256: string): Promise<boolean> {
  const info = await lstat(target);
  if (info.isFile() && (await hashFile(target)) === sha256) return true;
  throw new DownloadError('exists', 'invalid_file', `Refusing to overwrite ${target}: a different file already has that name.`);
}

async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Maps a failure to a GenpipeError: refusals pass through, aborts and network failures get their codes. */
function translate(error: unknown, signal: AbortSignal | undefined): unknown {
  // The dispatcher refused the connection (a name that resolves to a local address): a refusal like the URL check's.
  if (error instanceof InternalAddressError) return new DownloadError('internal_address', 'invalid_response', error.message);
  if (error instanceof GenpipeError) return error;
  if (signal?.aborted) return abortError(signal);
  const code = (error as NodeJS.ErrnoException).code;
  // Local filesystem failures are not the network's fault.
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code) && ['ENOSPC', 'EACCES', 'EROFS', 'EDQUOT', 'EMFILE', 'EIO'].includes(code))
    return error;
  const outcome = classifyTransportError(error, false);
  return new GenpipeError(
    outcomeErrorCode(outcome),
    `The download failed: ${redact(error instanceof Error ? error.message : String(error))}.`,
    { cause: error },
  );
}
