/**
 * One S3-compatible store as a run uses it: a preflight before any spending, and verified uploads.
 *
 * - The AWS SDK is loaded here, with a dynamic import, and only when a sink is opened: a run
 *   without a sink never loads it (test/sink/sdk-not-loaded.test.ts).
 * - Credentials come from the SDK's default chain only (environment, shared files, AWS_PROFILE).
 *   genpipe never holds them in its own state; the secret key and session token are registered
 *   with util/redact.ts, so that no log, journal or report line can carry them.
 * - Every upload carries x-amz-checksum-sha256 (a real store checks it against the bytes it got)
 *   and the SHA-256 as metadata (`x-amz-meta-sha256`), which lets a later upload see that the
 *   object is already there, multipart objects included (their checksum is a checksum of parts).
 * - Neither is trusted alone, since a store may ignore the checksum and keep the metadata whatever
 *   bytes it kept: what the store answers is checked against the file by genpipe itself, the ETag
 *   where it is an MD5 (each part's, and the composite, for a multipart upload), else the object
 *   read back; when neither is possible the upload is said "unverified" (verify()).
 * - The SDK retries nothing (maxAttempts 1): genpipe's backoff and the run's retry budget decide.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open as openFile, readFile, stat } from 'node:fs/promises';
import { extname } from 'node:path';
import pLimit, { type LimitFunction } from 'p-limit';
import type { S3Client } from '@aws-sdk/client-s3';
import { GenpipeError } from '../api/errors.js';
import { backoffDelay } from '../api/retry.js';
import { sleep } from '../api/sleep.js';
import { registerSecret } from '../util/redact.js';
import { clip } from '../util/zod-issues.js';
import type { SinkConfig } from './sink-config.js';
import {
  codeOf,
  describeSdkError,
  isCredentialProblem,
  isNotFound,
  isTransient,
  nameOf,
  SinkUploadError,
  statusOf,
  StoredBytesMismatch,
} from './sink-errors.js';

/** Files larger than this go as multipart uploads. */
export const MULTIPART_THRESHOLD = 16 * 1024 * 1024;
/** Each part of a multipart upload; S3's smallest is 5 MiB. */
export const PART_SIZE = 8 * 1024 * 1024;
/** Parts of one multipart upload in flight at once. */
const PART_QUEUE = 4;
/** Failed attempts of one upload before it is left pending, whatever the budget says (as downloads). */
export const MAX_UPLOAD_FAILURES = 20;
/** Backoff between attempts: the downloads' (instance-driver.ts), since the same run waits on both. */
const UPLOAD_BACKOFF = { baseMs: 200, capMs: 10_000 };
/** Attempts of each preflight request: a blip at the start should not stop a run, a dead store should. */
const PREFLIGHT_ATTEMPTS = 3;
/**
 * How long a store may send nothing at all on a request's connection before the request fails (a
 * transient failure, retried as any other): the AWS CLI's read timeout. An idle limit, not a total
 * one, so a large upload on a slow link is never cut while its bytes move. GENPIPE_SINK_IDLE_MS: tests.
 */
const idleTimeoutMs = (): number => Number(process.env.GENPIPE_SINK_IDLE_MS) || 60_000;
/**
 * The whole of each preflight request (a HEAD, an empty PUT): a store that cannot answer those in
 * 20 s is not one to start a run on. Half the idle limit, so a test's short limit times these out first.
 */
const preflightTimeoutMs = (): number => Math.min(20_000, idleTimeoutMs() / 2);

type S3Module = typeof import('@aws-sdk/client-s3');

let sdk: Promise<{ s3: S3Module }> | undefined;

/** The SDK, loaded once, on the first sink a process opens. */
function loadSdk(): Promise<{ s3: S3Module }> {
  sdk ??= (async () => {
    // genpipe supports Node 20; without this, every run on it would print the SDK's notice that its
    // releases after January 2027 need Node 22 (the lockfile pins a release that runs on 20).
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    const s3 = await import('@aws-sdk/client-s3');
    return { s3 };
  })();
  return sdk;
}

export interface UploadOptions {
  /** Takes one retry from the run's budget; false: stop trying, the upload stays pending. */
  consumeRetry(): boolean;
  /** A success earns a retry back (the run's policy), when the caller keeps such a budget. */
  creditRetry?(): void;
  signal?: AbortSignal | undefined;
  /** The SHA-256 journaled when the file was downloaded: a file changed since is not uploaded. */
  expectedSha256?: string | undefined;
  /**
   * False skips the HEAD that looks for the object first (one request in two), for a file the
   * caller knows is new to the sink: downloaded by this very process in a run that is not a resume
   * nor a --reuse. Only on a store whose PUTs are conditional: elsewhere the HEAD is what keeps
   * another run's object from being replaced. Default true: a resume, a reuse or a second run into
   * the same prefix then sends nothing for an object already there.
   */
  checkExisting?: boolean | undefined;
  /** For tests of the backoff; Math.random otherwise. */
  random?: () => number;
  /**
   * Told, and awaited, before anything is sent that replaces an object genpipe did not write for
   * this file (`on_conflict: overwrite`): the caller journals it first.
   */
  onOverwrite?: ((previous: ExistingSummary, reason: 'on_conflict' | 'remade') => Promise<void>) | undefined;
  /**
   * The object genpipe itself last wrote at this key for this instance (journaled), if any: found
   * there still, it is replaced by the file made again, whatever `on_conflict` says.
   */
  ownObject?: { sha256: string; etag: string } | undefined;
  /** A multipart upload's journal: what to resume from, and where each step of it is told. */
  multipart?: MultipartHooks | undefined;
}

/** A multipart upload begun, as journaled: enough for another process to finish it. */
export interface MultipartProgress {
  uploadId: string;
  partSize: number;
  /** The file's: a resume of other bytes aborts the upload instead. */
  sha256: string;
  encryption: string | undefined;
  customerKey: boolean;
  /** The parts landed: number → ETag (no quotes). */
  parts: Map<number, string>;
}

export interface MultipartHooks {
  /** The upload journaled by an earlier process, if any; kept up to date by the upload. */
  resume?: MultipartProgress | undefined;
  /** Awaited before the first part is sent: the caller journals the upload id. */
  started(progress: MultipartProgress): Promise<void>;
  /** Awaited as each part lands. */
  part(uploadId: string, partNumber: number, etag: string): Promise<void>;
  /** The upload was aborted (or found gone): no resume may use it. */
  aborted(uploadId: string): Promise<void>;
  retried?: boolean;
}

/** An object found at a key, as a conflict or an overwrite names it. */
export interface ExistingSummary {
  size: number;
  /** Without quotes; '' when the store gave none. */
  etag: string;
  /** Its `x-amz-meta-sha256`, when it has one. */
  sha256: string | undefined;
}

/**
 * Another object is at the key, with other bytes than the file's, and the sink's `on_conflict`
 * is `fail` (the upload stays to do: `action` failed) or `skip` (it is left there for good): nothing
 * was overwritten.
 */
export interface UploadConflict {
  conflict: true;
  key: string;
  action: 'failed' | 'skipped';
  existing: ExistingSummary;
  /** The file's. */
  size: number;
  sha256: string;
}

export interface UploadResult {
  key: string;
  size: number;
  /** Lowercase hex. */
  sha256: string;
  /** The store's ETag, without quotes. */
  etag: string;
  /** True when an object with this key, size and SHA-256 was already there: nothing was sent. */
  skipped: boolean;
  /** How genpipe knows the store holds the file's bytes, or why it cannot know. */
  verification: Verification;
  conflict?: undefined;
  /** The object this upload replaced (`on_conflict: overwrite`), when there was one. */
  overwrote?: ExistingSummary | undefined;
}

/**
 * `etag`: the store's ETag is the file's MD5 (or, multipart, each part's and their composite);
 * `read_back`: the object was read back and hashed; `unverified`: neither could be done.
 */
export type Verification = { method: 'etag' } | { method: 'read_back' } | { method: 'unverified'; reason: string };

/** The file as the upload and its checks need it. */
interface FileContent {
  size: number;
  /** Lowercase hex, as the ones below. */
  sha256: string;
  md5: string;
  /** The whole file, when it goes in one PUT. */
  bytes: Buffer | undefined;
  /** Its parts of PART_SIZE bytes, when it goes as a multipart upload (and for a multipart ETag). */
  parts: PartDigest[] | undefined;
}

interface PartDigest {
  size: number;
  sha256: string;
  md5: string;
}

/** What the store answered for a write, as far as the ETag check needs it. */
interface StoreAnswer {
  etag: string;
  /** `x-amz-server-side-encryption`: under aws:kms the ETag is not an MD5 of the bytes. */
  encryption: string | undefined;
  /** Encrypted with a customer's key (SSE-C): the ETag is not an MD5 either. */
  customerKey: boolean;
}

interface ExistingObject extends StoreAnswer {
  size: number;
  sha256: string | undefined;
  checksum: string | undefined;
}

type ObjectParams = { Bucket: string; Key: string; Metadata: Record<string, string>; ContentType: string };

/** A store opened for one sink: its client, its upload limit (the sink's `concurrency`). */
export class S3Store {
  readonly #s3: S3Module;
  readonly #limit: LimitFunction;
  /**
   * True once the preflight saw the store refuse, with 412, a second conditional PUT of its probe:
   * every PUT then carries If-None-Match: *. Otherwise each upload looks with a HEAD first, which
   * leaves a moment between the two where another writer's object can be replaced.
   */
  #conditional = false;

  private constructor(
    readonly config: SinkConfig,
    /** The SDK client; tests add middleware to it to watch what is sent. */
    readonly client: S3Client,
    modules: { s3: S3Module },
  ) {
    this.#s3 = modules.s3;
    this.#limit = pLimit(config.concurrency);
  }

  /**
   * Loads the SDK and makes the client. Credentials are not looked at yet (preflight and the first
   * upload do): opening never fails on them.
   */
  static async open(config: SinkConfig): Promise<S3Store> {
    const modules = await loadSdk();
    const region = config.region ?? (await chainRegion(modules.s3));
    const client = new modules.s3.S3Client({
      region,
      ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
      forcePathStyle: config.pathStyle,
      maxAttempts: 1,
      // Only the checksums genpipe computes: the SDK's default (a CRC32 trailer on a chunked body)
      // is one more encoding for a store to get wrong, and SHA-256 is what the journal records.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // A bucket in another region than the client's answers with a redirect the SDK can follow.
      followRegionRedirects: true,
      // A store that accepts the connection and then says nothing must not hang the run (the
      // promise: a run always ends). The SDK's requestTimeout only warns unless told to throw.
      requestHandler: { connectionTimeout: 10_000, socketTimeout: idleTimeoutMs(), throwOnRequestTimeout: true },
    });
    return new S3Store(config, client, modules);
  }

  /** `s3://BUCKET/PREFIX`, for messages. */
  get where(): string {
    return `s3://${this.config.bucket}${this.config.prefix === '' ? '' : `/${this.config.prefix}`}`;
  }

  close(): void {
    this.client.destroy();
  }

  /**
   * Checks, before a run spends anything, that the bucket exists and that the credentials may write
   * to it: a HEAD of the bucket, then a small probe object put under the prefix and removed.
   * Undefined when all is well, else the one sentence the run exits 2 with.
   */
  async preflight(signal?: AbortSignal): Promise<GenpipeError | undefined> {
    const s3 = this.#s3;
    const sendOptions = { requestTimeout: preflightTimeoutMs(), ...(signal ? { abortSignal: signal } : {}) };
    const problem = await this.#credentials();
    if (problem) return problem;
    const bucket = this.config.bucket;
    try {
      await preflightAttempts(() => this.client.send(new s3.HeadBucketCommand({ Bucket: bucket }), sendOptions), signal);
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') throw error;
      if (isNotFound(error)) return this.#missingBucket();
      // 403: these credentials may not read the bucket's listing; write-only keys are common, so the probe decides.
      if (!isCredentialProblem(error)) return this.#unreachable(error);
    }
    const probe = `${this.config.prefix === '' ? '' : `${this.config.prefix}/`}.genpipe-probe-${randomUUID()}`;
    const empty = Buffer.alloc(0);
    const putProbe = (conditional: boolean): Promise<unknown> =>
      this.client.send(
        new s3.PutObjectCommand({
          Bucket: bucket,
          Key: probe,
          Body: empty,
          ContentLength: 0,
          ChecksumSHA256: sha256Base64(empty),
          ...(conditional ? { IfNoneMatch: '*' } : {}),
        }),
        sendOptions,
      );
    try {
      try {
        await preflightAttempts(() => putProbe(true), signal);
      } catch (error) {
        // A store that refuses the condition itself (not the write): the probe goes without it.
        if (
          isTransient(error) ||
          isCredentialProblem(error) ||
          isNotFound(error) ||
          (error instanceof GenpipeError && error.code === 'aborted')
        )
          throw error;
        await preflightAttempts(() => putProbe(false), signal);
      }
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') throw error;
      if (isNotFound(error) || nameOf(error) === 'NoSuchBucket') return this.#missingBucket();
      if (isCredentialProblem(error)) {
        return new GenpipeError(
          'credentials',
          `The store refused to let these credentials write to ${this.where} (${describeSdkError(error)}): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, and the key's permissions on the bucket.`,
        );
      }
      return this.#unreachable(error);
    }
    // The same probe again, with If-None-Match: only a 412 says the store keeps an object it has
    // from a conditional PUT (a store that ignores the header answers 200 and overwrites).
    try {
      await preflightAttempts(() => putProbe(true), signal);
      this.#conditional = false;
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') throw error;
      this.#conditional = statusOf(error) === 412 || nameOf(error) === 'PreconditionFailed';
    }
    let headRefused = false;
    try {
      await preflightAttempts(() => this.client.send(new s3.HeadObjectCommand({ Bucket: bucket, Key: probe }), sendOptions), signal);
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') throw error;
      headRefused = isCredentialProblem(error) && !isTransient(error);
    }
    try {
      await this.client.send(new s3.DeleteObjectCommand({ Bucket: bucket, Key: probe }), sendOptions);
    } catch {
      // A key that may write but not delete leaves an empty probe object behind: harmless, and no
      // reason to stop a run that can upload.
    }
    if (headRefused && this.config.onConflict !== 'overwrite') {
      return new GenpipeError(
        'credentials',
        `The store lets these credentials write to ${this.where} but refuses to let them read what is there (HEAD refused, HTTP 403), so genpipe cannot tell another run's object from its own and will not write over it: allow s3:GetObject on the bucket, or set the sink's on_conflict: overwrite.`,
      );
    }
    return undefined;
  }

  /**
   * Uploads one file as `key`, at most `concurrency` at once: skipped when the object is already
   * there with the same size and SHA-256, else sent with its checksum (multipart above 16 MB).
   * Transient failures are retried with backoff while `consumeRetry()` allows; anything else, or
   * retries run out, throws a SinkUploadError (the file stays on disk, its upload pending).
   */
  upload(file: string, key: string, options: UploadOptions): Promise<UploadResult | UploadConflict> {
    return this.#limit(() => this.#upload(file, key, options));
  }

  /** Whether this store's PUTs are conditional (known after the preflight). */
  get conditional(): boolean {
    return this.#conditional;
  }

  async #upload(file: string, key: string, options: UploadOptions): Promise<UploadResult | UploadConflict> {
    const problem = await this.#credentials();
    if (problem) throw new SinkUploadError(problem.code, problem.message, false, key);
    let content: FileContent;
    try {
      content = await readContent(file);
    } catch (error) {
      throw new SinkUploadError(
        'invalid_file',
        `The output ${clip(file, 200)} could not be read for its upload to ${this.where} (${describeSdkError(error)}).`,
        false,
        key,
      );
    }
    if (options.expectedSha256 !== undefined && content.sha256 !== options.expectedSha256) {
      throw new SinkUploadError(
        'invalid_file',
        `The output ${clip(file, 200)} changed after it was downloaded (its SHA-256 is not the journal's), so it was not uploaded to ${this.where}.`,
        false,
        key,
      );
    }
    for (let failures = 0; ;) {
      try {
        // After a failed attempt the object may be there (a PUT whose answer was lost): look first.
        const result = await this.#attempt(file, key, content, options, options.checkExisting !== false || failures > 0);
        options.creditRetry?.();
        return result;
      } catch (error) {
        if (options.signal?.aborted || nameOf(error) === 'AbortError')
          throw new GenpipeError('aborted', 'The upload was aborted.', { cause: error });
        const transient = isTransient(error);
        if (transient && failures < MAX_UPLOAD_FAILURES && options.consumeRetry()) {
          await sleep(backoffDelay(failures++, UPLOAD_BACKOFF, options.random), options.signal);
          continue;
        }
        const why = describeSdkError(error);
        const message = transient
          ? `The upload of ${key} to ${this.where} kept failing (${why}); the file is kept and a resume uploads it.`
          : `The store refused the upload of ${key} to ${this.where} (${why}); the file is kept and a resume uploads it once that is fixed.`;
        throw new SinkUploadError(codeOf(error), message, transient, key);
      }
    }
  }

  /**
   * One try. The object at the key, if any, is looked at first (a HEAD) unless the caller knows the
   * file is new and the store's PUTs are conditional: the same bytes count as delivered, other
   * bytes are a conflict (or, under `on_conflict: overwrite`, replaced once the caller journaled
   * it). Then a PUT or a multipart upload, conditional where the store can, and the check that the
   * store holds the file's bytes (verify()). A conditional write refused with 412 looks again.
   */
  async #attempt(
    file: string,
    key: string,
    content: FileContent,
    options: UploadOptions,
    look: boolean,
  ): Promise<UploadResult | UploadConflict> {
    const signal = options.signal;
    let overwrote: ExistingSummary | undefined;
    const common = { Bucket: this.config.bucket, Key: key, Metadata: { sha256: content.sha256 }, ContentType: contentTypeOf(file) };
    for (let pass = 0; ; pass++) {
      const existing = look || !this.#conditional || pass > 0 ? await this.#head(key, signal) : undefined;
      if (existing) {
        const same = await this.#sameBytes(key, existing, content, signal);
        if (same.same)
          return { key, size: content.size, sha256: content.sha256, etag: existing.etag, skipped: true, verification: same.verification };
        const previous = { size: existing.size, etag: existing.etag, sha256: existing.sha256 };
        const own =
          options.ownObject !== undefined && existing.sha256 === options.ownObject.sha256 && existing.etag === options.ownObject.etag;
        if (!own && this.config.onConflict !== 'overwrite')
          return {
            conflict: true,
            key,
            action: this.config.onConflict === 'skip' ? 'skipped' : 'failed',
            existing: previous,
            size: content.size,
            sha256: content.sha256,
          };
        await options.onOverwrite?.(previous, own ? 'remade' : 'on_conflict');
        overwrote = previous;
      } else if (pass > 2) {
        // Refused as present, then shown absent, again and again: a store to try later.
        throw new GenpipeError('server_error', `the store refused a conditional write of ${key} and then showed no object there`);
      }
      // Replacing what the HEAD above saw (journaled): no condition.
      const condition = this.#conditional && this.config.onConflict !== 'overwrite' && overwrote === undefined;
      let sent: StoreAnswer;
      try {
        sent = content.bytes
          ? await this.#put(common, content.bytes, content, condition, signal)
          : await this.#multipart(file, common, content, condition, options);
      } catch (error) {
        if (condition && isPreconditionFailed(error)) continue;
        throw error;
      }
      const verification = await this.#verifyUpload(key, sent, content, signal);
      return { key, size: content.size, sha256: content.sha256, etag: sent.etag, skipped: false, verification, overwrote };
    }
  }

  /** One PUT of the whole file, with its SHA-256 checksum (checked by stores that check it). */
  async #put(
    common: ObjectParams,
    bytes: Buffer,
    content: FileContent,
    condition: boolean,
    signal: AbortSignal | undefined,
  ): Promise<StoreAnswer> {
    const sent = await this.client.send(
      new this.#s3.PutObjectCommand({
        ...common,
        Body: bytes,
        ContentLength: content.size,
        ChecksumSHA256: base64Of(content.sha256),
        ...(condition ? { IfNoneMatch: '*' } : {}),
      }),
      sendOptions(signal),
    );
    return { etag: unquote(sent.ETag ?? ''), encryption: sent.ServerSideEncryption, customerKey: sent.SSECustomerAlgorithm !== undefined };
  }

  /**
   * genpipe's own multipart upload (lib-storage's Upload hides the upload id and its parts'
   * answers): each part carries its SHA-256 checksum, and the ETag the store answers for it is
   * compared with the part's MD5. The upload id is journaled (`options.multipart.started`) before
   * the first part, and each part as it lands: a process killed midway leaves a journal from which
   * the next one (`options.multipart.resume`) sends only the missing parts and completes the same
   * upload. A transient failure keeps the upload for the next attempt; anything else aborts it
   * (best effort: s3rver has no AbortMultipartUpload) and journals that, so no resume reuses it.
   */
  async #multipart(
    file: string,
    common: ObjectParams,
    content: FileContent,
    condition: boolean,
    options: UploadOptions,
  ): Promise<StoreAnswer> {
    const s3 = this.#s3;
    const signal = options.signal;
    const hooks = options.multipart;
    const parts = content.parts as PartDigest[];
    let progress = hooks?.resume;
    if (progress && (progress.partSize !== PART_SIZE || progress.sha256 !== content.sha256)) {
      await this.#abortMultipart(common, progress.uploadId, hooks);
      progress = undefined;
    }
    if (!progress) {
      const created = await this.client.send(
        new s3.CreateMultipartUploadCommand({ ...common, ChecksumAlgorithm: 'SHA256' }),
        sendOptions(signal),
      );
      if (created.UploadId === undefined)
        throw new GenpipeError('server_error', 'The store began a multipart upload without an upload id.');
      progress = {
        uploadId: created.UploadId,
        partSize: PART_SIZE,
        sha256: content.sha256,
        encryption: created.ServerSideEncryption,
        customerKey: created.SSECustomerAlgorithm !== undefined,
        parts: new Map(),
      };
      await hooks?.started(progress);
    }
    if (hooks) hooks.resume = progress;
    const upload = progress;
    const answer = { encryption: upload.encryption, customerKey: upload.customerKey };
    try {
      const limit = pLimit(PART_QUEUE);
      const done = await Promise.all(
        parts.map((part, index) =>
          limit(async () => {
            const number = index + 1;
            const journaled = upload.parts.get(number);
            // A part journaled by an earlier process for these bytes: not sent again.
            if (journaled !== undefined && etagAgainst(journaled, { md5: part.md5 }, answer) !== 'mismatch')
              return { PartNumber: number, ETag: `"${journaled}"`, ChecksumSHA256: base64Of(part.sha256) };
            const bytes = await readPart(file, index, part);
            const sent = await this.client.send(
              new s3.UploadPartCommand({
                Bucket: common.Bucket,
                Key: common.Key,
                UploadId: upload.uploadId,
                PartNumber: number,
                Body: bytes,
                ContentLength: bytes.length,
                ChecksumSHA256: base64Of(part.sha256),
              }),
              sendOptions(signal),
            );
            const etag = unquote(sent.ETag ?? '');
            if (etagAgainst(etag, { md5: part.md5 }, answer) === 'mismatch') throw damaged(common.Key, `part ${number}`);
            upload.parts.set(number, etag);
            await hooks?.part(upload.uploadId, number, etag);
            return { PartNumber: number, ETag: sent.ETag ?? etag, ChecksumSHA256: base64Of(part.sha256) };
          }),
        ),
      );
      const completed = await this.client.send(
        new s3.CompleteMultipartUploadCommand({
          Bucket: common.Bucket,
          Key: common.Key,
          UploadId: upload.uploadId,
          MultipartUpload: { Parts: done },
          ...(condition ? { IfNoneMatch: '*' } : {}),
        }),
        sendOptions(signal),
      );
      if (hooks) hooks.resume = undefined;
      return {
        etag: unquote(completed.ETag ?? ''),
        encryption: completed.ServerSideEncryption ?? upload.encryption,
        customerKey: upload.customerKey,
      };
    } catch (error) {
      const gone = nameOf(error) === 'NoSuchUpload';
      // Down or busy: the upload and its parts wait for the next attempt, or the next process.
      if (isTransient(error) && !(error instanceof StoredBytesMismatch) && !gone && !signal?.aborted) throw error;
      if (signal?.aborted) throw error;
      await this.#abortMultipart(common, upload.uploadId, hooks);
      // The journaled upload is no longer there (completed, aborted or expired by the store): begin a new one.
      if (gone && hooks !== undefined && hooks.retried !== true) {
        hooks.retried = true;
        return this.#multipart(file, common, content, condition, options);
      }
      throw error;
    }
  }

  /** Ends a multipart upload (best effort: s3rver has no AbortMultipartUpload) and says so to the journal. */
  async #abortMultipart(common: ObjectParams, uploadId: string, hooks: MultipartHooks | undefined): Promise<void> {
    await this.client
      .send(new this.#s3.AbortMultipartUploadCommand({ Bucket: common.Bucket, Key: common.Key, UploadId: uploadId }))
      .catch(() => undefined);
    if (hooks) hooks.resume = undefined;
    await hooks?.aborted(uploadId);
  }

  /**
   * What the store answered for an upload, against the file: the ETag where it is an MD5 (the
   * file's, or the composite of its parts' for a multipart upload), else the object read back.
   * Other bytes than the file's: the object (genpipe's own, just written) is removed and the
   * attempt fails as transient, so the upload is tried again under the budget.
   */
  async #verifyUpload(key: string, sent: StoreAnswer, content: FileContent, signal: AbortSignal | undefined): Promise<Verification> {
    const byEtag = etagAgainst(sent.etag, content, sent);
    if (byEtag === 'mismatch') {
      await this.#dropDamaged(key);
      throw damaged(key, 'object');
    }
    const verification = await this.#readBackIfNeeded(key, content, byEtag, signal);
    if (verification === 'mismatch') {
      await this.#dropDamaged(key);
      throw damaged(key, 'object', 'read_back');
    }
    return verification;
  }

  /**
   * Whether the object already at `key` holds the file's bytes, by the same evidence as an
   * upload's check: its SHA-256 metadata and size, then its ETag where it is an MD5, else a read-back.
   */
  async #sameBytes(
    key: string,
    existing: ExistingObject,
    content: FileContent,
    signal: AbortSignal | undefined,
  ): Promise<{ same: true; verification: Verification } | { same: false }> {
    const claimed = existing.sha256 === content.sha256 || existing.checksum === base64Of(content.sha256);
    if (existing.size !== content.size || !claimed) return { same: false };
    const byEtag = etagAgainst(existing.etag, content, existing);
    if (byEtag === 'mismatch') return { same: false };
    const verification = await this.#readBackIfNeeded(key, content, byEtag, signal);
    return verification === 'mismatch' ? { same: false } : { same: true, verification };
  }

  /** The ETag's verdict, completed by a read-back where the sink asks for one or the ETag cannot tell. */
  async #readBackIfNeeded(
    key: string,
    content: FileContent,
    byEtag: 'match' | 'unknown',
    signal: AbortSignal | undefined,
  ): Promise<Verification | 'mismatch'> {
    const wanted = this.config.readBack === 'always' || (byEtag === 'unknown' && this.config.readBack === 'when_needed');
    if (wanted && content.size <= this.config.readBackMaxBytes) {
      return (await this.#readBackSha256(key, signal)) === content.sha256 ? { method: 'read_back' } : 'mismatch';
    }
    if (byEtag === 'match') return { method: 'etag' };
    const reason =
      this.config.readBack === 'never'
        ? 'the store gave no MD5 ETag and the sink reads nothing back'
        : `the store gave no MD5 ETag and the file is over the read-back limit of ${this.config.readBackMaxBytes} bytes`;
    return { method: 'unverified', reason };
  }

  /** The SHA-256 of the object as the store serves it. */
  async #readBackSha256(key: string, signal: AbortSignal | undefined): Promise<string> {
    const got = await this.client.send(new this.#s3.GetObjectCommand({ Bucket: this.config.bucket, Key: key }), sendOptions(signal));
    const hash = createHash('sha256');
    for await (const chunk of got.Body as AsyncIterable<Uint8Array>) hash.update(chunk);
    return hash.digest('hex');
  }

  /** Removes an object genpipe has just written with bytes that are not the file's; best effort. */
  async #dropDamaged(key: string): Promise<void> {
    await this.client.send(new this.#s3.DeleteObjectCommand({ Bucket: this.config.bucket, Key: key })).catch(() => undefined);
  }

  /** The object at `key` as far as skipping needs it, or undefined when it is not there (or may not be read). */
  async #head(key: string, signal: AbortSignal | undefined): Promise<ExistingObject | undefined> {
    try {
      const head = await this.client.send(
        new this.#s3.HeadObjectCommand({ Bucket: this.config.bucket, Key: key, ChecksumMode: 'ENABLED' }),
        sendOptions(signal),
      );
      return {
        size: head.ContentLength ?? -1,
        sha256: head.Metadata?.sha256,
        // A multipart object's checksum is one of its parts' checksums (`...-N`): never the file's.
        checksum: head.ChecksumSHA256,
        etag: unquote(head.ETag ?? ''),
        encryption: head.ServerSideEncryption,
        customerKey: head.SSECustomerAlgorithm !== undefined,
      };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      // 403: a key that may not read cannot tell another run's object from none. Only a sink that
      // replaces whatever is there goes on (the preflight refused the others).
      if (isCredentialProblem(error) && !isTransient(error)) {
        if (this.config.onConflict === 'overwrite') return undefined;
        throw new GenpipeError('credentials', `the store refused to show what is at ${key} (HTTP 403), so it was not written over`);
      }
      throw error;
    }
  }

  /** Resolves the credentials once; registers their secret parts for redaction. */
  #credentialsChecked: Promise<GenpipeError | undefined> | undefined;
  #credentials(): Promise<GenpipeError | undefined> {
    this.#credentialsChecked ??= (async () => {
      try {
        const credentials = await this.client.config.credentials();
        registerSecret(credentials.secretAccessKey);
        if (credentials.sessionToken) registerSecret(credentials.sessionToken);
        return undefined;
      } catch {
        return new GenpipeError(
          'credentials',
          `No AWS credentials were found for the sink ${this.where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (genpipe reads them through the AWS SDK and never stores them).`,
        );
      }
    })();
    return this.#credentialsChecked;
  }

  #missingBucket(): GenpipeError {
    return new GenpipeError(
      'config',
      `The bucket ${this.config.bucket} of the sink ${this.where} does not exist at ${endpointName(this.config)}; create it, or fix the sink's URL or endpoint.`,
    );
  }

  #unreachable(error: unknown): GenpipeError {
    return new GenpipeError(
      'config',
      `The sink ${this.where} could not be checked at ${endpointName(this.config)} (${describeSdkError(error)}); nothing was sent to the generation service.`,
    );
  }
}

/** The region the SDK's chain gives (AWS_REGION, the profile's), else us-east-1, which every S3-compatible store accepts. */
async function chainRegion(s3: S3Module): Promise<string> {
  const probe = new s3.S3Client({});
  try {
    return await probe.config.region();
  } catch {
    return 'us-east-1';
  } finally {
    probe.destroy();
  }
}

/** A preflight request, tried again shortly on a transient failure (no budget: nothing is spent yet). */
async function preflightAttempts<T>(send: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await send();
    } catch (error) {
      // Ctrl-C while a store is slow to answer: stopped now, not after every attempt.
      if (signal?.aborted) throw new GenpipeError('aborted', 'Interrupted while checking the storage sink.', { cause: error });
      if (!isTransient(error) || attempt + 1 >= PREFLIGHT_ATTEMPTS) throw error;
      await sleep(backoffDelay(attempt, UPLOAD_BACKOFF), signal);
    }
  }
}

/**
 * The file's size, SHA-256 and MD5; its bytes too when it goes in one PUT (read once, hashed and
 * sent from the same buffer), else the digests of each of its parts, hashed as a stream and read
 * again part by part by the multipart upload.
 */
async function readContent(file: string): Promise<FileContent> {
  const { size } = await stat(file);
  if (size <= MULTIPART_THRESHOLD) {
    const bytes = await readFile(file);
    return { size: bytes.length, sha256: hexOf('sha256', bytes), md5: hexOf('md5', bytes), bytes, parts: undefined };
  }
  const sha256 = createHash('sha256');
  const md5 = createHash('md5');
  const parts: PartDigest[] = [];
  let part = { size: 0, sha256: createHash('sha256'), md5: createHash('md5') };
  let read = 0;
  const endPart = (): void => {
    parts.push({ size: part.size, sha256: part.sha256.digest('hex'), md5: part.md5.digest('hex') });
    part = { size: 0, sha256: createHash('sha256'), md5: createHash('md5') };
  };
  for await (const chunk of createReadStream(file)) {
    let bytes = chunk as Buffer;
    sha256.update(bytes);
    md5.update(bytes);
    read += bytes.length;
    while (bytes.length > 0) {
      const take = Math.min(bytes.length, PART_SIZE - part.size);
      part.sha256.update(bytes.subarray(0, take));
      part.md5.update(bytes.subarray(0, take));
      part.size += take;
      bytes = bytes.subarray(take);
      if (part.size === PART_SIZE) endPart();
    }
  }
  if (part.size > 0 || parts.length === 0) endPart();
  return { size: read, sha256: sha256.digest('hex'), md5: md5.digest('hex'), bytes: undefined, parts };
}

/** Part `index` of the file (PART_SIZE bytes from index × PART_SIZE), checked against its digest: a file changed since is not sent. */
async function readPart(file: string, index: number, digest: PartDigest): Promise<Buffer> {
  const handle = await openFile(file, 'r');
  try {
    const bytes = Buffer.alloc(digest.size);
    const { bytesRead } = await handle.read(bytes, 0, digest.size, index * PART_SIZE);
    if (bytesRead !== digest.size || hexOf('sha256', bytes) !== digest.sha256)
      throw new GenpipeError('invalid_file', `The output ${clip(file, 200)} changed while it was being uploaded.`);
    return bytes;
  } finally {
    await handle.close();
  }
}

/**
 * What an ETag says of the bytes: `match` when it is the MD5 of the file (or, for an object
 * written in parts of PART_SIZE, the MD5 of their MD5s with `-N`), `mismatch` when it is such an
 * MD5 of other bytes, `unknown` when it cannot tell (SSE-KMS or SSE-C, another part size, a store
 * whose ETags are not MD5s).
 */
export function etagAgainst(
  etag: string,
  content: { md5: string; parts?: readonly { md5: string }[] | undefined },
  answer: { encryption?: string | undefined; customerKey?: boolean | undefined },
): 'match' | 'mismatch' | 'unknown' {
  if (answer.customerKey || (answer.encryption !== undefined && answer.encryption.startsWith('aws:kms'))) return 'unknown';
  const tag = etag.toLowerCase();
  if (/^[0-9a-f]{32}$/.test(tag)) return tag === content.md5 ? 'match' : 'mismatch';
  const composite = /^([0-9a-f]{32})-(\d+)$/.exec(tag);
  if (composite && content.parts && Number(composite[2]) === content.parts.length) {
    return composite[1] === compositeMd5(content.parts) ? 'match' : 'mismatch';
  }
  return 'unknown';
}

/** S3's ETag of a multipart object, without its `-N`: the MD5 of the parts' binary MD5s. */
const compositeMd5 = (parts: readonly { md5: string }[]): string =>
  createHash('md5')
    .update(Buffer.concat(parts.map((part) => Buffer.from(part.md5, 'hex'))))
    .digest('hex');

const damaged = (key: string, what: string, evidence: 'etag' | 'read_back' = 'etag'): StoredBytesMismatch =>
  new StoredBytesMismatch(key, what, evidence);
const isPreconditionFailed = (error: unknown): boolean => statusOf(error) === 412 || nameOf(error) === 'PreconditionFailed';
const sha256Base64 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('base64');
const hexOf = (algorithm: 'sha256' | 'md5', bytes: Buffer): string => createHash(algorithm).update(bytes).digest('hex');
const base64Of = (hex: string): string => Buffer.from(hex, 'hex').toString('base64');
const sendOptions = (signal: AbortSignal | undefined): { abortSignal?: AbortSignal } => (signal ? { abortSignal: signal } : {});
const unquote = (etag: string): string => etag.replace(/^"|"$/g, '');

/** Where the store is, for messages: the endpoint's origin (never a user:password part), or AWS. */
function endpointName(config: SinkConfig): string {
  const endpoint = config.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  if (endpoint === undefined) return 'AWS S3';
  try {
    return new URL(endpoint).origin;
  } catch {
    return 'the configured endpoint';
  }
}

/** Content types for what genpipe writes, so a CDN serves the objects as what they are. */
const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
  '.wav': 'audio/wav',
  '.mp3': 'audio/mpeg',
  '.md': 'text/markdown; charset=utf-8',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};
const contentTypeOf = (file: string): string => CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream';
