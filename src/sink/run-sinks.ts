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
import { manifestHasSink, objectKey, publicUrl, resolveStepSinks, sinkUri, type SinkConfig, type SinkRun } from './sink-config.js';
import { S3Store, type UploadOptions } from './s3-store.js';

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

  /** Its public URL (`sink_url`), when the sink has `public_base_url`. */
  url(runRelativePath: string): string | undefined {
    return publicUrl(this.config, runRelativePath);
  }

  /**
   * Uploads every pending output of an instance (pendingSinkUploads: downloaded, not yet in the
   * sink with these bytes), all at once within the sink's `concurrency`, journaling each record
   * through `journal` as it lands. `failed` is the first upload that could not be done (the others
   * still went): the instance is then "completed, upload pending". `unverified`: the keys uploaded
   * whose bytes in the store could not be checked (each journaled `sink_unverified`).
   */
  async uploadPending(
    runDir: string,
    instance: string,
    entry: Pick<InstanceState, 'downloads' | 'sinkUploads'>,
    options: UploadOptions,
    journal: (record: SinkRecord) => Promise<void>,
  ): Promise<UploadPendingResult> {
    let uploaded = 0;
    let bytes = 0;
    const unverified: string[] = [];
    const results = await Promise.allSettled(
      pendingSinkUploads(entry).map(async (download) => {
        const record = await this.uploadOutput(runDir, instance, download, options, journal);
        uploaded++;
        if (!record.skipped) bytes += record.size;
        if (record.unverified) unverified.push(record.key);
      }),
    );
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    // An abort, or a journal that could not be written, ends the instance's life here: not a pending upload.
    if (rejected && (!(rejected.reason instanceof GenpipeError) || rejected.reason.code === 'aborted')) throw rejected.reason;
    return { uploaded, bytes, failed: rejected?.reason as GenpipeError | undefined, unverified: unverified.sort() };
  }

  /**
   * Uploads one downloaded output of `instance` (its `downloaded` record), journals its records
   * through `journal` (`sink_uploaded`, then `sink_unverified` when the store's bytes could not be
   * checked) and returns the `sink_uploaded` one, with `unverified` set in that case. Throws a
   * SinkUploadError when it could not (the file stays, the upload pending), or a GenpipeError `aborted`.
   */
  async uploadOutput(
    runDir: string,
    instance: string,
    download: JournalRecordOf<'downloaded'>,
    options: UploadOptions,
    journal: (record: SinkRecord) => Promise<void> = async () => undefined,
  ): Promise<JournalRecordOf<'sink_uploaded'> & { unverified?: JournalRecordOf<'sink_unverified'> }> {
    const key = this.key(download.path);
    const result = await this.store.upload(join(runDir, download.path), key, {
      ...options,
      expectedSha256: options.expectedSha256 ?? download.sha256,
    });
    const record: JournalRecordOf<'sink_uploaded'> = {
      type: 'sink_uploaded',
      instance,
      output: download.output ?? 0,
      bucket: this.config.bucket,
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
      output: record.output,
      bucket: record.bucket,
      key: record.key,
      sha256: record.sha256,
      reason: result.verification.reason,
    };
    await journal(unverified);
    return { ...record, unverified };
  }
}

/** The records a sink journals for an instance. */
export type SinkRecord = JournalRecordOf<'sink_uploaded' | 'sink_unverified'>;

/** What uploadPending did for one instance; see there. */
export interface UploadPendingResult {
  uploaded: number;
  bytes: number;
  failed: GenpipeError | undefined;
  unverified: string[];
}

export class RunSinks {
  readonly #byStep: ReadonlyMap<string, StepSink>;
  readonly #stores: readonly S3Store[];

  private constructor(byStep: ReadonlyMap<string, StepSink>, stores: readonly S3Store[]) {
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
    return new RunSinks(byStep, [...stores.values()]);
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
