/**
 * The download phase of an attempt: each output not downloaded yet is fetched into the run
 * directory (temp file, fsync, rename: files/download.ts) and journaled, retried as classify()
 * allows. An agent's answer is written after them as `<name>.md`, journaled as the output after
 * the last file. It returns true, or the attempt's fate when a file is missing; settle() does the rest.
 */
import { sleep } from '../../api/sleep.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import { DownloadError, downloadToFile, writeTextOutput, type DownloadResult } from '../files/download.js';
import { answerPath, outputPath } from '../files/output-names.js';
import type { InstanceState } from '../journal/run-state.js';
import { classify } from './classify.js';
import { crashPoint } from './crash-points.js';
import type { AttemptFate } from './fate.js';
import type { PhaseDeps } from './phase-deps.js';

/** An output to fetch: where it is, and the content types it may have. */
export interface OutputFile {
  url: string;
  name?: string | undefined;
  accept?: readonly string[] | undefined;
}

export interface DownloadRequest {
  step: StepPlan;
  instance: PlannedInstance;
  files: readonly OutputFile[];
  /** The instance's state: outputs it has downloaded already are not fetched again. */
  entry: InstanceState | undefined;
  /** A conversation turn's answer, written as a file beside the media. */
  answer?: string | undefined;
}

export async function downloadOutputs(d: PhaseDeps, r: DownloadRequest): Promise<true | AttemptFate> {
  const { fx } = d;
  const id = r.instance.id;
  for (const [index, file] of r.files.entries()) {
    if (r.entry?.downloads?.has(index)) continue;
    const result = await downloadOne(d, r, file, outputPath(r.step.id, r.instance, file, r.files.length, index));
    if (!('relativePath' in result)) return result;
    crashPoint('mid_rename');
    d.hooks.onDownloaded?.(result.relativePath, result.imageSize);
    await fx.log({
      type: 'downloaded',
      instance: id,
      output: index,
      path: result.relativePath,
      sha256: result.sha256,
      size: result.size,
      ...(result.imageSize ? { width: result.imageSize.width, height: result.imageSize.height } : {}),
    });
  }
  if (r.answer === undefined || r.entry?.downloads?.has(r.files.length)) return true;
  const text = r.answer.endsWith('\n') ? r.answer : `${r.answer}\n`;
  try {
    const written = await fx.op(() =>
      writeTextOutput({ runDir: fx.settings.runDir, relativePath: answerPath(r.step.id, r.instance), text }),
    );
    await fx.log({
      type: 'downloaded',
      instance: id,
      output: r.files.length,
      path: written.relativePath,
      sha256: written.sha256,
      size: written.size,
    });
  } catch (error) {
    if (!(error instanceof DownloadError)) throw error;
    return { kind: 'files_missing', code: error.code, message: error.message, permanent: true };
  }
  return true;
}

/** One output, retried while classify() and the run's retry budget allow. */
async function downloadOne(
  d: PhaseDeps,
  r: DownloadRequest,
  file: OutputFile,
  relativePath: string,
): Promise<DownloadResult | AttemptFate> {
  const { fx } = d;
  const accept = file.accept ?? [];
  for (let tries = 0; ;) {
    try {
      const result = await fx.op(() =>
        downloadToFile({
          url: file.url,
          runDir: fx.settings.runDir,
          relativePath,
          maxBytes: fx.settings.maxDownloadBytes,
          allowedContentTypes: accept.length > 0 ? [...accept] : ['*/*'],
          dispatcher: fx.settings.client.transport.dispatcher,
          signal: fx.signal,
        }),
      );
      fx.creditRetry();
      return result;
    } catch (error) {
      const decision = classify('download', error, { tries, random: d.random });
      if (decision.kind === 'throw') throw error;
      if (decision.kind === 'fate') return decision.fate;
      if (!fx.consumeRetry()) return decision.orElse;
      tries++;
      await fx.op(() => sleep(decision.delayMs, fx.signal));
    }
  }
}
