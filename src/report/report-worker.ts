/**
 * The second thread of a big report, serving in turn (worker-task.ts serveTasks): it reads the
 * journal's second part (instance-lines.ts: its chunks spilled into the directory it is given,
 * their paths the answer), then writes the report's lines from an id on (write-report.ts: into
 * part files, its sums the answer).
 */
import { serveTasks } from '../util/worker-task.js';
import { gatherRuns, lineStartFrom, type ReaderAnswer, type ReaderJob } from './instance-lines.js';
import { InstanceOrder } from '../plan/instance-order.js';
import { writeTail, type TailAnswer, type TailJob } from './write-report.js';

async function work(task: unknown): Promise<ReaderAnswer | TailAnswer> {
  const job = task as ReaderJob | TailJob;
  if (job.kind === 'tail') return await writeTail(job);
  const { spills } = await gatherRuns(job.journal, {
    start: await lineStartFrom(job.journal, job.from),
    chunk: job.chunk,
    order: new InstanceOrder(job.order),
    gallery: job.gallery,
    sinks: job.sinks,
    fullParse: job.fullParse,
    spillDir: async () => job.dir,
    spillAll: true,
    prefix: 'b',
  });
  return { spills };
}

serveTasks(work);
