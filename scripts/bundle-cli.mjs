#!/usr/bin/env node
// Bundles the compiled CLI (dist/cli/main.js and the command modules it loads on demand) into
// dist/bundle/ with esbuild, so `genpipe` starts from a handful of files instead of some fifty
// modules, and zod's locales (loaded whole by `import 'zod'`, never used) are left out. Packages
// with native parts or their own worker files stay external. bin/genpipe.js loads the bundle when
// it exists, else dist/cli/main.js.
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const outdir = join(root, 'dist', 'bundle');
rmSync(outdir, { recursive: true, force: true });
await build({
  // plan-worker, report-worker: worker threads (src/plan/parallel-plan.ts, src/report/instance-lines.ts), found beside the chunk that starts them.
  entryPoints: {
    main: join(root, 'dist', 'cli', 'main.js'),
    'plan-worker': join(root, 'dist', 'plan', 'plan-worker.js'),
    'report-worker': join(root, 'dist', 'report', 'report-worker.js'),
  },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Bundled: zod, yaml, csv-parse, undici and genpipe itself. External: what loads native code or
  // files of its own. undici is bundled since 2026-11-26: its hundred-odd CommonJS files, each
  // resolved and wrapped on its own, took about 70 ms of every `genpipe run`'s start before the
  // first request (median of 8 alternated starts, 574 ms against 502 ms here); its llhttp parser
  // is WebAssembly inlined in its JavaScript, so the bundle needs no file of undici's.
  // The AWS SDK too: src/sink/s3-store.ts imports it dynamically, only for a manifest with a sink,
  // and bundling its few hundred modules would only slow every build for runs that never load it.
  external: ['sharp', 'bullmq', 'ioredis', 'playwright-core', 'cli-progress', 'p-limit', '@aws-sdk/client-s3', '@aws-sdk/lib-storage'],
  logLevel: 'warning',
  legalComments: 'none',
  // Bundled CommonJS code (yaml) calls require() for Node's built-ins: give ESM one.
  banner: {
    js: "import { createRequire as __genpipeCreateRequire } from 'node:module'; const require = __genpipeCreateRequire(import.meta.url);",
  },
});
