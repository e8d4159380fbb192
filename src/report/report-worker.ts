/**
 * The second thread of a big journal's reading (instance-lines.ts): gathers the facts of the
 * journal's second half, spills its chunks into the directory it is given, and answers with
 * their paths, in journal order.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { gatherRuns, type ReaderAnswer, type ReaderJob } from './instance-lines.js';

const job = workerData as ReaderJob;

let answer: ReaderAnswer;
try {
  const { spills } = await gatherRuns(job.journal, { start: job.start, chunk: job.chunk, gallery: job.gallery, fullParse: job.fullParse, spillDir: async () => job.dir, spillAll: true, prefix: 'b' });
  answer = { spills };
} catch (error) {
  answer = { failed: error instanceof Error ? error.message : String(error) };
}
parentPort?.postMessage(answer);
