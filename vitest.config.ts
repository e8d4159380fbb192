import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every temporary file of the run under one directory, removed at its end (test/global-tmpdir.ts).
    globalSetup: ['test/global-tmpdir.ts'],
    // Integration tests start real HTTP servers on loopback and spend much of their time waiting
    // (polls, Retry-After, lock and stall periods): three forks on the 2-core machine keep both
    // cores busy (10% idle, against 708 s of suite for two forks: 638 s).
    pool: 'forks',
    maxWorkers: 3,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
