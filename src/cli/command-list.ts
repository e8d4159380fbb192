/**
 * Every command, in the order `genpipe --help` lists them, with the one line that lists it. A
 * command's module (and all it imports: the client, undici, the emulator, zod schemas) is loaded
 * only when that command runs, so `genpipe --help` starts in about the time Node itself does.
 */
import type { Command } from './command.js';

export interface CommandEntry {
  name: string;
  /** One line for `genpipe --help`. */
  summary: string;
  load(): Promise<Command>;
}

export const COMMANDS: readonly CommandEntry[] = [
  {
    name: 'run',
    summary: 'run a pipeline: submit, track, download, journal; resumable after any crash',
    load: async () => (await import('./commands/run.js')).runCommand,
  },
  {
    name: 'resume',
    summary: 'continue an interrupted run from its journal, without paying twice',
    load: async () => (await import('./commands/run.js')).resumeCommand,
  },
  {
    name: 'validate',
    summary: 'check a manifest and every instance it expands to; sends nothing that spends credits',
    load: async () => (await import('./commands/validate.js')).validateCommand,
  },
  {
    name: 'plan',
    summary: 'show what a manifest will run and what it will cost; sends nothing that spends credits',
    load: async () => (await import('./commands/plan.js')).planCommand,
  },
  {
    name: 'report',
    summary: 'the credit-cost report of a run (also written as report.json, report.csv, report.md)',
    load: async () => (await import('./commands/report.js')).reportCommand,
  },
  {
    name: 'review',
    summary: 'review a run in the browser: approve, reject and star its results (saved to review.json)',
    load: async () => (await import('./commands/review.js')).reviewCommand,
  },
  {
    name: 'ui',
    summary: 'a live web page over every run: status, counts and money, updated as runs start and end',
    load: async () => (await import('./commands/ui.js')).uiCommand,
  },
  {
    name: 'diff',
    summary: 'compare two runs side by side: inputs that differ, status, cost and both images, as a page',
    load: async () => (await import('./commands/diff.js')).diffCommand,
  },
  {
    name: 'worker',
    summary: 'a fleet worker: takes instance jobs from a Redis queue (BullMQ), submits and follows them',
    load: async () => (await import('./commands/worker.js')).workerCommand,
  },
  {
    name: 'queue',
    summary: 'a fleet queue: set its account-wide limits, or show its jobs per run and its workers',
    load: async () => (await import('./commands/queue.js')).queueCommand,
  },
  {
    name: 'schedule',
    summary: 'cron schedules of runs on a fleet queue: each tick runs once, on one worker with --runs',
    load: async () => (await import('./commands/schedule.js')).scheduleCommand,
  },
  {
    name: 'runs',
    summary: 'list past runs with their status and spend, newest first',
    load: async () => (await import('./commands/runs.js')).runsCommand,
  },
  {
    name: 'catalog',
    summary: 'show the character-sheet options catalog or the marketing presets',
    load: async () => (await import('./commands/catalog.js')).catalogCommand,
  },
  {
    name: 'status',
    summary: 'show the status and outputs of one request',
    load: async () => (await import('./commands/status.js')).statusCommand,
  },
  {
    name: 'cancel',
    summary: 'cancel a request that is still queued',
    load: async () => (await import('./commands/cancel.js')).cancelCommand,
  },
  {
    name: 'config',
    summary: 'print every setting with where it came from (flag, environment, config file, default); secrets as set or not set',
    load: async () => (await import('./commands/config.js')).configCommand,
  },
  {
    name: 'doctor',
    summary: 'check a setup before the night: credentials, addresses, catalogs, Redis, sinks, notify targets; spends nothing',
    load: async () => (await import('./commands/doctor.js')).doctorCommand,
  },
  {
    name: 'emulator',
    summary: 'run the local Generation Service emulator (ledger, faults, no credits spent)',
    load: async () => (await import('./commands/emulator.js')).emulatorCommand,
  },
];
