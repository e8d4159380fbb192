/**
 * The second thread of a big report: reads the journal's second half (instance-lines.ts: its
 * chunks spilled into the directory it is given, their paths the answer), or writes the report's
 * lines from an id on (write-report.ts: into part files, its sums the answer).
 */
import { workerData } from 'node:worker_threads';
import { answerTask } from '../util/worker-task.js';
import { gatherRuns, type ReaderAnswer, type ReaderJob } from './instance-lines.js';
import { writeTail, type TailAnswer, type TailJob } from './write-report.js';

const job = workerData as ReaderJob | TailJob;

async function work(): Promise<ReaderAnswer | TailAnswer> {
  if (job.kind === 'tail') return await writeTail(job);
  const { spills } = await gatherRuns(job.journal, {
    start: job.start,
    chunk: job.chunk,
    gallery: job.gallery,
    sinks: job.sinks,
    fullParse: job.fullParse,
    spillDir: async () => job.dir,
    spillAll: true,
    prefix: 'b',
  });
  return { spills };
}

await answerTask(work);
