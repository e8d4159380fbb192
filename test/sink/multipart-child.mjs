// One process of the multipart resume test (multipart-resume.test.ts): replays the journal file,
// uploads the instance's pending outputs through the built sink code, appending each record to
// the journal as it lands (synchronously, as the run's journal does), and is SIGKILLed midway.
// argv: manifest file, run directory, journal file, instance.
import { appendFileSync, readFileSync } from 'node:fs';
import { loadManifestFile } from '../../dist/manifest/load.js';
import { applyRecord, emptyRunState } from '../../dist/run/journal/run-state.js';
import { RunSinks } from '../../dist/sink/run-sinks.js';

const [manifestFile, runDir, journalFile, instance] = process.argv.slice(2);
const state = emptyRunState();
for (const line of readFileSync(journalFile, 'utf8').split('\n')) if (line.trim()) applyRecord(state, JSON.parse(line));
const sinks = await RunSinks.open(loadManifestFile(manifestFile), { id: 'run-1', startedAt: new Date('2026-12-02T05:00:00Z') });
const sink = sinks.forStep('clips');
const result = await sink.uploadPending(runDir, instance, state.instances.get(instance), { consumeRetry: () => false }, async (record) => {
  appendFileSync(journalFile, `${JSON.stringify(record)}\n`);
});
sinks.close();
process.stdout.write(`${JSON.stringify({ uploaded: result.uploaded, failed: result.failed?.message ?? null })}\n`);
