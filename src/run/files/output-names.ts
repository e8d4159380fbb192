/**
 * Output file names. genpipe chooses them from instance ids, never from URLs (reliability.md #16),
 * and checks that every path it writes stays inside the run directory.
 *
 * `safeFileName('sheets[tier=cats,seed=3]', 'png')` → `sheets_tier=cats,seed=3-1f0c9a7be2d4.png`
 *
 * The rule, and why names stay unique:
 * - The character rules of util/file-stem.ts apply (letters of any script kept, NFC), and a Windows
 *   device name (`CON`, `NUL`…) gets a `_`.
 * - When that left a non-empty id exactly as it was, the id is the name: identity is injective.
 * - Otherwise (or when the id is long, or already looks like a hashed name) the readable part is
 *   cut to a bounded length and `-` plus 12 hex digits of sha256(id) is appended, so two ids that
 *   read alike still get different names. An untouched id never ends in `-` + 12 hex digits, so
 *   the two kinds cannot meet.
 * - The output index, when given, is appended as `+N`: `+` is outside the kept characters, so no
 *   stem contains it.
 */
import { createHash } from 'node:crypto';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import { clipStem, isWindowsDevice, sanitizeStem, tidyStem, utf8Bytes } from '../../util/file-stem.js';

/** Longest stem (name without index and extension), in characters. */
export const MAX_STEM_LENGTH = 100;
/**
 * Longest stem in UTF-8 bytes: a name of non-ASCII letters (three bytes a CJK character) stays
 * under 180 bytes with its index and extension, below NAME_MAX (255) even with a temp prefix.
 */
export const MAX_STEM_BYTES = 150;
const HASH_DIGITS = 12;
const HASHED_SUFFIX = /-[0-9a-f]{12}$/;
const EXTENSION = /^[a-z0-9]{1,10}$/;

export interface SafeFileNameOptions {
  /** Which output of the instance, for instances that produce several. */
  index?: number;
}

/** Maps an instance id to a safe, readable, bounded and unique file name (see the header comment). */
export function safeFileName(instanceId: string, extension: string, options: SafeFileNameOptions = {}): string {
  if (!EXTENSION.test(extension))
    throw new GenpipeError(
      'invalid_input',
      `"${extension.slice(0, 20)}" is not a file extension genpipe writes (1 to 10 lowercase letters or digits).`,
    );
  const { index } = options;
  if (index !== undefined && (!Number.isSafeInteger(index) || index < 0))
    throw new GenpipeError('invalid_input', 'An output index must be a non-negative integer.');
  let stem = sanitizeStem(instanceId);
  const changed =
    stem === '' ||
    stem !== instanceId ||
    stem.length > MAX_STEM_LENGTH ||
    utf8Bytes(stem) > MAX_STEM_BYTES ||
    HASHED_SUFFIX.test(stem) ||
    isWindowsDevice(stem);
  if (changed) {
    // UTF-16 code units, not UTF-8: UTF-8 turns every lone surrogate into U+FFFD, which would collide.
    const hash = createHash('sha256').update(Buffer.from(instanceId, 'utf16le')).digest('hex').slice(0, HASH_DIGITS);
    let readable = tidyStem(clipStem(stem, MAX_STEM_LENGTH - HASH_DIGITS - 2, MAX_STEM_BYTES - HASH_DIGITS - 2)) || 'instance';
    if (isWindowsDevice(readable)) readable = `_${readable}`;
    stem = `${readable}-${hash}`;
  }
  return `${stem}${index === undefined ? '' : `+${index}`}.${extension}`;
}

/**
 * The file name of an instance whose step names its files (`output.filename`): the stem the plan
 * rendered and checked for collisions, with the output index and the extension.
 */
export function templatedFileName(stem: string, extension: string, options: SafeFileNameOptions = {}): string {
  if (!EXTENSION.test(extension))
    throw new GenpipeError(
      'invalid_input',
      `"${extension.slice(0, 20)}" is not a file extension genpipe writes (1 to 10 lowercase letters or digits).`,
    );
  return `${stem}${options.index === undefined ? '' : `+${options.index}`}.${extension}`;
}

/** True when `child` is `parent` itself or lies below it (both resolved; no filesystem access). */
export function isInside(parent: string, child: string): boolean {
  const rel = relative(resolve(parent), resolve(child));
  return rel === '' || (!isAbsolute(rel) && rel !== '..' && !rel.startsWith(`..${sep}`));
}

/**
 * Resolves a path relative to the run directory and refuses one that is absolute, contains NUL or
 * leads outside it. Symlinks are not followed here; `downloadToFile` checks the real path too.
 */
export function resolveInside(runDir: string, relativePath: string): string {
  if (
    relativePath === '' ||
    relativePath.includes('\0') ||
    isAbsolute(relativePath) ||
    /^[A-Za-z]:/.test(relativePath) ||
    relativePath.startsWith('\\')
  ) {
    throw new GenpipeError('invalid_input', 'An output path must be a non-empty relative path without NUL characters.');
  }
  const root = resolve(runDir);
  const full = resolve(root, relativePath);
  if (full === root || !isInside(root, full)) throw new GenpipeError('invalid_input', 'An output path must stay inside the run directory.');
  return full;
}

/** A step's folder in the run directory: `outputs/<step>`. */
export const stepFolder = (stepId: string): string => `outputs/${safeFileName(stepId, 'd').replace(/\.d$/, '')}`;

/**
 * Where an instance's output goes in the run directory: `outputs/<step>/<name>[+index].<ext>`, the
 * name from the step's `output.filename` when it has one, else from the instance id.
 */
export function outputPath(
  stepId: string,
  instance: { id: string; fileStem?: string | undefined },
  file: { url: string; accept?: readonly string[] | undefined },
  count: number,
  index: number,
): string {
  return `${stepFolder(stepId)}/${outputFileName(instance, extensionFor(file.url, file.accept ?? []), count > 1 ? { index } : {})}`;
}

/** Where a conversation turn's answer goes: `outputs/<step>/<name>.md`, beside the media it made. */
export const answerPath = (stepId: string, instance: { id: string; fileStem?: string | undefined }): string =>
  `${stepFolder(stepId)}/${outputFileName(instance, 'md', {})}`;

function outputFileName(instance: { id: string; fileStem?: string | undefined }, extension: string, options: SafeFileNameOptions): string {
  return instance.fileStem === undefined
    ? safeFileName(instance.id, extension, options)
    : templatedFileName(instance.fileStem, extension, options);
}

const EXTENSIONS: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'video/quicktime': 'mov',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/wave': 'wav',
  'audio/mpeg': 'mp3',
  'audio/mp4': 'm4a',
};

/** The file's extension: the URL's when it is one the accepted types allow, else the first type's. */
function extensionFor(url: string, accept: readonly string[]): string {
  const fromUrl = /\.([a-z0-9]{2,5})$/i.exec(new URL(url).pathname)?.[1]?.toLowerCase();
  const allowed = new Set(accept.map((t) => EXTENSIONS[t]).filter((e): e is string => e !== undefined));
  if (fromUrl && (allowed.has(fromUrl) || (fromUrl === 'jpeg' && allowed.has('jpg')))) return fromUrl === 'jpeg' ? 'jpg' : fromUrl;
  return EXTENSIONS[accept[0] ?? ''] ?? 'bin';
}
