/**
 * The worker thread of a parallel plan (parallel-plan.ts): checks the instances `from` to `to` of
 * the plan of `manifest`, spooling the valid ones' JSON lines, and answers with what it found.
 */
import { workerData } from 'node:worker_threads';
import { answerTask } from '../util/worker-task.js';
import { loadManifestFile } from '../manifest/load.js';
import { InstanceSpool } from './instance-spool.js';
import type { HelperAnswer, HelperJob } from './parallel-plan.js';
import { checkInstances, preparePlan } from './plan.js';

const job = workerData as HelperJob;

async function check(): Promise<HelperAnswer> {
  const loaded = loadManifestFile(job.manifest);
  const { plan, catalog } = await preparePlan(loaded, {
    env: job.env,
    run: { id: job.run.id, startedAt: new Date(job.run.startedAt) },
    // The catalogs the first thread read: this one never goes to the network.
    presets: async () => {
      if (job.presets === undefined) throw new Error('the plan reads presets the first thread did not');
      return job.presets;
    },
    catalog: async () => {
      if (job.catalog === undefined) throw new Error('the plan reads the options catalog the first thread did not');
      return job.catalog;
    },
  });
  if (plan.totalInstances !== job.to)
    throw new Error(`the manifest now has ${plan.totalInstances} instances, not ${job.to}: was it changed?`);
  const spool = new InstanceSpool(job.spool, { continues: true });
  try {
    const { seen, localFiles, prices } = await checkInstances(
      plan,
      catalog,
      { maxProblems: job.maxProblems, onInstance: (instance) => spool.add(instance) },
      { from: job.from, to: job.to },
    );
    return { seen: [...seen], localFiles: [...localFiles], prices: [...(prices ?? [])] };
  } finally {
    spool.close();
  }
}

await answerTask(check);
