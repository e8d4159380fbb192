/**
 * A run's storage sinks, as the session and the instance driver use them:
 *
 * - the session calls `openRunSinks` once the run's id and start are known: undefined when the
 *   manifest has no sink (nothing loaded), else the run's sinks, whose `preflight()` it awaits
 *   before the first spending request (a problem: exit 2, zero requests sent);
 * - the driver, once an instance's files are downloaded, uploads each pending one with
 *   `forStep(step)?.uploadOutput(...)` and journals the `sink_uploaded` record it returns;
 * - `close()` when the run ends.
 */
import { join } from 'node:path';
import { GenpipeError } from '../api/errors.js';
import type { LoadedManifest } from '../manifest/load.js';
import type { JournalRecordOf } from '../run/journal/journal-records.js';
import { pendingSinkUploads, type InstanceState } from '../run/journal/run-state.js';
import {
  manifestHasSink,
  objectKey,
  publicUrl,
  resolveStepSinks,
  sinkPrefixWarnings,
  sinkUri,
  type SinkConfig,
  type SinkRun,
} from './sink-config.js';
import { S3Store, type MultipartProgress, type UploadOptions } from './s3-store.js';

/** One step's sink: where its outputs go, and the upload of one of them. */
export class StepSink {
  constructor(
    readonly config: SinkConfig,
    /** The store (shared by every step with the same sink); tests reach its SDK client through it. */
    readonly store: S3Store,
  ) {}

  /** The object key of a journaled output path (`outputs/<step>/<file>`). */
  key(runRelativePath: string): string {
    return objectKey(this.config, runRelativePath);
  }

  /** `s3://BUCKET/KEY` of an output, for outputs.csv and outputs.jsonl (`sink_uri`). */
  uri(runRelativePath: string): string {
    return sinkUri(this.config, this.key(runRelativePath));
  }

  /** `s3://BUCKET/KEY` of an object key of this sink. */
  uriOfKey(key: string): string {
    return sinkUri(this.config, key);
  }

  /** Its public URL (`sink_url`), when the sink has `public_base_url`. */
  url(runRelativePath: string): string | undefined {
    return publicUrl(this.config, runRelativePath);
  }

  /**
   * Uploads every pending output of an instance (pendingSinkUploads: downloaded, not yet in the
   * sink with these bytes), all at once within the sink's `concurrency`, journaling each record
   * through `journal` as it lands. `failed` is the first upload that could not be done (the others
   * still went): the instance is then "completed, upload pending". `conflicts`: the outputs another
   * object at their key kept out (nothing overwritten; journaled `sink_conflict`); `unverified`:
   * the keys uploaded whose bytes in the store could not be checked (journaled `sink_unverified`).
   */
  async uploadPending(
    runDir: string,
    instance: string,
    entry: Pick<InstanceState, 'downloads' | 'sinkUploads'> &
      Partial<Pick<InstanceState, 'sinkConflicts' | 'sinkWritten' | 'sinkMultipart'>>,
    options: UploadOptions,
    journal: (record: SinkRecord) => Promise<void>,
  ): Promise<UploadPendingResult> {
    let uploaded = 0;
    let bytes = 0;
    const unverified: string[] = [];
    const conflicts: SinkConflict[] = [];
    const results = await Promise.allSettled(
      pendingSinkUploads(entry).map(async (download) => {
        const key = this.key(download.path);
        const ownObject = entry.sinkWritten?.get(key);
        const begun = entry.sinkMultipart?.get(download.output ?? 0);
        const resume: MultipartProgress | undefined =
          begun && begun.record.key === key
            ? {
                uploadId: begun.record.uploadId,
                partSize: begun.record.partSize,
                sha256: begun.record.sha256,
                encryption: begun.record.encryption,
                customerKey: begun.record.customerKey === true,
                parts: new Map(begun.parts),
              }
            : undefined;
        const record = await this.uploadOutput(runDir, instance, download, { ...options, ownObject, resumeMultipart: resume }, journal);
        if (record.type === 'sink_conflict') {
          conflicts.push({ key: record.key, output: record.output, action: record.action });
          return;
        }
        uploaded++;
        if (!record.skipped) bytes += record.size;
        if (record.unverified) unverified.push(record.key);
      }),
    );
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    // An abort, or a journal that could not be written, ends the instance's life here: not a pending upload.
    if (rejected && (!(rejected.reason instanceof GenpipeError) || rejected.reason.code === 'aborted')) throw rejected.reason;
    return {
      uploaded,
      bytes,
      failed: rejected?.reason as GenpipeError | undefined,
      conflicts: conflicts.sort((a, b) => a.output - b.output),
      unverified: unverified.sort(),
    };
  }

  /**
   * Uploads one downloaded output of `instance` (its `downloaded` record), journals its records
   * through `journal` and returns the last: `sink_uploaded` (then `sink_unverified` when the
   * store's bytes could not be checked: it is returned on the first, as `unverified`), or
   * `sink_conflict` when another object is at the key (nothing was overwritten). Under
   * `on_conflict: overwrite`, a `sink_overwrite` is journaled before anything replaces an object.
   * Throws a SinkUploadError when it could not (the file stays, the upload pending), or a GenpipeError `aborted`.
   */
  async uploadOutput(
    runDir: string,
    instance: string,
    download: JournalRecordOf<'downloaded'>,
    options: UploadOptions & { resumeMultipart?: MultipartProgress | undefined },
    journal: (record: SinkRecord) => Promise<void> = async () => undefined,
  ): Promise<(JournalRecordOf<'sink_uploaded'> & { unverified?: JournalRecordOf<'sink_unverified'> }) | JournalRecordOf<'sink_conflict'>> {
    const key = this.key(download.path);
    const output = download.output ?? 0;
    const bucket = this.config.bucket;
    const result = await this.store.upload(join(runDir, download.path), key, {
      ...options,
      expectedSha256: options.expectedSha256 ?? download.sha256,
      multipart: {
        resume: options.resumeMultipart,
        started: (progress) =>
          journal({
            type: 'sink_multipart',
            instance,
            output,
            bucket,
            key,
            uploadId: progress.uploadId,
            sha256: progress.sha256,
            partSize: progress.partSize,
            ...(progress.encryption === undefined ? {} : { encryption: progress.encryption }),
            ...(progress.customerKey ? { customerKey: true } : {}),
          }),
        part: (uploadId, part, etag) => journal({ type: 'sink_part', instance, output, uploadId, part, etag }),
        aborted: (uploadId) => journal({ type: 'sink_multipart_aborted', instance, output, uploadId }),
      },
      onOverwrite: (previous, reason) =>
        journal({
          type: 'sink_overwrite',
          instance,
          output,
          bucket,
          key,
          sha256: download.sha256,
          previousSize: previous.size,
          previousEtag: previous.etag,
          ...(previous.sha256 === undefined ? {} : { previousSha256: previous.sha256 }),
          reason,
        }),
    });
    if (result.conflict) {
      const conflict: JournalRecordOf<'sink_conflict'> = {
        type: 'sink_conflict',
        instance,
        output,
        bucket,
        key,
        sha256: result.sha256,
        size: result.size,
        action: result.action,
        existingSize: result.existing.size,
        existingEtag: result.existing.etag,
        ...(result.existing.sha256 === undefined ? {} : { existingSha256: result.existing.sha256 }),
      };
      await journal(conflict);
      return conflict;
    }
    const record: JournalRecordOf<'sink_uploaded'> = {
      type: 'sink_uploaded',
      instance,
      output,
      bucket,
      key: result.key,
      size: result.size,
      sha256: result.sha256,
      etag: result.etag,
      ...(result.skipped ? { skipped: true } : {}),
    };
    await journal(record);
    if (result.verification.method !== 'unverified') return record;
    const unverified: JournalRecordOf<'sink_unverified'> = {
      type: 'sink_unverified',
      instance,
      output,
      bucket,
      key: record.key,
      sha256: record.sha256,
      reason: result.verification.reason,
    };
    await journal(unverified);
    return { ...record, unverified };
  }
}

/** The records a sink journals for an instance. */
export type SinkRecord = JournalRecordOf<
  'sink_uploaded' | 'sink_unverified' | 'sink_conflict' | 'sink_overwrite' | 'sink_multipart' | 'sink_part' | 'sink_multipart_aborted'
>;

/**
 * An output another object at its key kept out of the sink: `failed` (on_conflict: fail, the
 * default): the instance is "completed, upload conflict" and the run exits 1; `skipped`: left so on purpose.
 */
export interface SinkConflict {
  key: string;
  output: number;
  action: 'failed' | 'skipped';
}

/** What uploadPending did for one instance; see there. */
export interface UploadPendingResult {
  uploaded: number;
  bytes: number;
  failed: GenpipeError | undefined;
  conflicts: SinkConflict[];
  unverified: string[];
}

export class RunSinks {
  readonly #byStep: ReadonlyMap<string, StepSink>;
  readonly #stores: readonly S3Store[];

  private constructor(
    byStep: ReadonlyMap<string, StepSink>,
    stores: readonly S3Store[],
    /** Lines to say before the run starts (a prefix two runs can share: sinkPrefixWarnings()). */
    readonly warnings: readonly string[],
  ) {
    this.#byStep = byStep;
    this.#stores = stores;
  }

  /** The run's sinks; undefined when the manifest has none (the AWS SDK is then never loaded). */
  static async open(
    loaded: Pick<LoadedManifest, 'manifest'>,
    run: SinkRun,
    processEnv: NodeJS.ProcessEnv = process.env,
  ): Promise<RunSinks | undefined> {
    if (!manifestHasSink(loaded)) return undefined;
    const configs = resolveStepSinks(loaded, run, processEnv);
    const stores = new Map<SinkConfig, S3Store>();
    const byStep = new Map<string, StepSink>();
    try {
      for (const [step, config] of configs) {
        let store = stores.get(config);
        if (!store) {
          store = await S3Store.open(config);
          stores.set(config, store);
        }
        byStep.set(step, new StepSink(config, store));
      }
    } catch (error) {
      for (const store of stores.values()) store.close();
      throw error;
    }
    return new RunSinks(byStep, [...stores.values()], sinkPrefixWarnings(loaded));
  }

  /** The sink of a step, or undefined when its outputs stay on disk only. */
  forStep(stepId: string): StepSink | undefined {
    return this.#byStep.get(stepId);
  }

  /**
   * Checks every sink (one after another: a run has one or a few) before anything is spent; the
   * first problem, as the one sentence the run exits 2 with, or undefined when all may be written.
   */
  async preflight(signal?: AbortSignal): Promise<GenpipeError | undefined> {
    for (const store of this.#stores) {
      const problem = await store.preflight(signal);
      if (problem) return problem;
    }
    return undefined;
  }

  close(): void {
    for (const store of this.#stores) store.close();
  }
}
