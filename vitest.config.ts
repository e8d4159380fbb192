import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every temporary file of the run under one directory, removed at its end (test/global-tmpdir.ts).
    globalSetup: ['test/global-tmpdir.ts'],
    // Integration tests start real HTTP servers on loopback; keep the 2-core machine responsive.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
