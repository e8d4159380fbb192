#!/usr/bin/env node
// The minimal client (minimal-client.mjs) as a process of its own, so that the throughput benchmark
// times it the way it times genpipe: from spawn to exit, cold, module loading included. Arguments:
// BASE_URL DIR INSTANCES CONCURRENCY [journal]; the key comes from HF_KEY, as genpipe's does. Its CPU
// time (user and system, every thread) goes to stderr as JSON, as lib/measure-cli.mjs reports genpipe's.
const [baseUrl, dir, instances, concurrency, journal] = process.argv.slice(2);
const { minimalClientRun } = await import('./minimal-client.mjs');
const { writeMeasure } = await import('./measure-line.mjs');
await minimalClientRun({
  baseUrl,
  authorization: `Key ${process.env.HF_KEY}`,
  dir,
  instances: Number(instances),
  concurrency: Number(concurrency),
  journal: journal === 'journal',
});
writeMeasure();
