/**
 * The gallery as a view of a running run (run/run-options.ts RunView): told of each instance as it
 * finishes and each file as it arrives, it rewrites gallery.html now and then and once at the end.
 * The run knows nothing of it, so views cannot change what it spends; the session subscribes it.
 */
import type { Plan } from '../plan/plan.js';
import { planFileSteps, type StepSinkRecord } from '../run/files/run-dir.js';
import type { RunView, ViewedRun } from '../run/run-options.js';
import { GalleryCells } from './gallery-data.js';
import { GalleryWriter, pricesOf, publicBasesOf } from './write-gallery.js';
import { InstanceOrder } from '../plan/instance-order.js';

export function galleryView(
  runDir: string,
  plan: Plan,
  runId: string,
  sinks?: ReadonlyMap<string, StepSinkRecord>,
): (run: ViewedRun) => RunView {
  return (run) => {
    const steps = planFileSteps(plan, sinks);
    const cells = new GalleryCells(pricesOf({ steps }), undefined, publicBasesOf({ steps }), new InstanceOrder(steps));
    const gallery = new GalleryWriter(
      runDir,
      () => ({ plan: { pipeline: plan.name, runId, steps }, cells: cells.withLive(run.state.instances) }),
      (error) => run.failed(`could not write gallery.html: ${(error as Error).message}`),
    );
    return {
      finished: (id, entry) => cells.add(id, entry),
      downloaded: (path, size) => gallery.noteDownloaded(path, size),
      update: () => gallery.update(),
      finish: () => gallery.finish(),
    };
  };
}
