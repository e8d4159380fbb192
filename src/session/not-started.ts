/**
 * A run that does not start is still a night someone must hear of: a tick refused for its
 * configuration (exit 2), skipped for an overlap (exit 4) or unable to reach the service (exit 5)
 * delivers the `failure` notification to every target it can resolve, and leaves one line in
 * `<out>/<pipeline>/not-started.jsonl` that `genpipe runs` lists. Nothing goes to the service.
 */
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { GenpipeError } from '../api/errors.js';
import { loadManifestFile } from '../manifest/load.js';
import { NotifyTarget } from '../manifest/schema.js';
import { deliverNotifications } from '../notify/deliver.js';
import { notifySummary } from '../notify/notify-message.js';
import { resolveNotifyTargets, type ResolvedTarget } from '../notify/notify-targets.js';
import { emptyCounts } from '../run/events.js';
import { readPlanFile, newRunId } from '../run/files/run-dir.js';
import { LockedError } from '../run/lock/lock.js';
import { redact } from '../util/redact.js';
import { NOT_STARTED_FILE, type NotStartedRecord } from '../report/not-started-list.js';
import { EXIT, exitCodeFor } from './exit-codes.js';

const NOT_STARTED_CODES: ReadonlySet<number> = new Set([EXIT.invalidInput, EXIT.locked, EXIT.unavailable]);

interface ManifestView {
  name: string;
  notify: unknown[];
  outDir: string | undefined;
}

/**
 * What a manifest says of its name, notify targets and output folder, read leniently: a manifest
 * wrong elsewhere (a typo in a step) still names who to tell. Undefined when it cannot be read at all.
 */
function manifestView(path: string): ManifestView | undefined {
  const stem = basename(path, extname(path));
  try {
    const { manifest, dir } = loadManifestFile(path);
    const out = manifest.defaults?.output?.dir;
    return { name: manifest.name, notify: manifest.notify ?? [], outDir: out ? resolve(dir, out) : undefined };
  } catch {
    try {
      const raw = parseYaml(readFileSync(path, 'utf8')) as Record<string, unknown> | null;
      if (raw === null || typeof raw !== 'object') return undefined;
      const name = typeof raw.name === 'string' && /^[A-Za-z0-9_.-]+$/.test(raw.name) ? raw.name : stem;
      const defaults = raw.defaults as { output?: { dir?: unknown } } | undefined;
      const out = typeof defaults?.output?.dir === 'string' ? resolve(dirname(path), defaults.output.dir) : undefined;
      return { name, notify: Array.isArray(raw.notify) ? raw.notify : [], outDir: out };
    } catch {
      return undefined;
    }
  }
}

/**
 * The targets of the notify block and the flags, when they resolve: a manifest wrong elsewhere
 * still names who to tell, but a notify block that is itself wrong tells no one (its own refusal
 * is the message, and its URLs are not to be trusted).
 */
function notStartedTargets(
  path: string,
  entries: readonly unknown[],
  flagUrls: readonly string[],
  env: NodeJS.ProcessEnv,
): ResolvedTarget[] {
  if (!entries.every((entry) => NotifyTarget.safeParse(entry).success)) return [];
  const source = { locate: () => ({ file: path, line: 0, col: 0 }) };
  try {
    return resolveNotifyTargets(
      { manifest: { notify: entries }, source } as unknown as Parameters<typeof resolveNotifyTargets>[0],
      flagUrls,
      env,
    );
  } catch {
    return [];
  }
}

/**
 * Tells of a run that did not start: the `failure` notification to every target it can resolve,
 * and the record under `<out>/<pipeline>/`. Never throws: the error itself is what the caller reports.
 */
export async function tellNotStarted(
  error: unknown,
  where: { manifestPath: string | undefined; resumeDir: string | undefined; outDir: string | undefined },
  options: { notify?: readonly string[] | undefined; env: NodeJS.ProcessEnv; err: (line: string) => void; quiet?: boolean | undefined },
): Promise<void> {
  const exitCode = error instanceof GenpipeError ? exitCodeFor(error.code) : EXIT.internal;
  if (!NOT_STARTED_CODES.has(exitCode)) return;
  try {
    const manifestPath = where.manifestPath ?? (where.resumeDir === undefined ? undefined : await recordedManifest(where.resumeDir));
    const view = manifestPath === undefined ? undefined : manifestView(manifestPath);
    const reason = redact((error as Error).message.split('\n')[0] ?? '');
    const pipelineDir = pipelineDirOf(where, view);
    // Only a night that was skipped or could not reach its service leaves a record: a refused
    // input (a bad manifest, a spend not approved) keeps its promise of leaving nothing behind.
    const recorded = error instanceof GenpipeError && error.code !== 'invalid_input' && error.code !== 'invalid_file';
    if (pipelineDir !== undefined && recorded) appendRecord(pipelineDir, error, exitCode, reason);
    if (manifestPath === undefined) return;
    const targets = notStartedTargets(manifestPath, view?.notify ?? [], options.notify ?? [], options.env);
    if (targets.length === 0) return;
    const pipeline = view?.name ?? basename(manifestPath, extname(manifestPath));
    await deliverNotStarted(targets, { pipeline, pipelineDir, exitCode, reason }, options);
  } catch (failure) {
    options.err(redact(`warning: the run did not start, and telling of it failed too: ${(failure as Error).message}`));
  }
}

/** The manifest a resumed run recorded in its plan.json, if it can be read. */
const recordedManifest = (resumeDir: string): Promise<string | undefined> =>
  readPlanFile(resumeDir).then(
    (p) => p.manifest,
    () => undefined,
  );

/** Where the pipeline's runs are: beside the resumed run, else under the output folder by the manifest's name. */
function pipelineDirOf(
  where: { resumeDir: string | undefined; outDir: string | undefined },
  view: ReturnType<typeof manifestView> | undefined,
): string | undefined {
  if (where.resumeDir !== undefined) return dirname(resolve(where.resumeDir));
  return view === undefined ? undefined : join(resolve(where.outDir ?? view.outDir ?? 'runs'), view.name);
}

function appendRecord(pipelineDir: string, error: GenpipeError, exitCode: number, reason: string): void {
  const now = new Date();
  const record: NotStartedRecord = {
    id: newRunId(now),
    at: now.toISOString(),
    status: exitCode === EXIT.locked ? 'skipped' : 'refused',
    exit_code: exitCode,
    reason,
    overlap_with: error instanceof LockedError ? error.owner?.runId : undefined,
  };
  mkdirSync(pipelineDir, { recursive: true });
  appendFileSync(join(pipelineDir, NOT_STARTED_FILE), `${JSON.stringify(record)}\n`);
}

async function deliverNotStarted(
  targets: ReturnType<typeof notStartedTargets>,
  what: { pipeline: string; pipelineDir: string | undefined; exitCode: number; reason: string },
  options: { err: (line: string) => void; quiet?: boolean | undefined },
): Promise<void> {
  const summary = notifySummary(
    {
      pipeline: what.pipeline,
      runId: '',
      runDir: what.pipelineDir ?? '',
      outcome: 'failed',
      exitCode: what.exitCode,
      message: `The run did not start: ${what.reason}`,
      counts: emptyCounts(),
      durationMs: 0,
    },
    undefined,
  );
  for (const r of await deliverNotifications(targets, summary)) {
    if (!r.delivered)
      options.err(`warning: the ${r.event} notification to ${r.target} was not delivered: ${r.error ?? 'no reason given'}.`);
    else if (!options.quiet) options.err(`notified ${r.target} (${r.event}, ${r.format}).`);
  }
}
