#!/usr/bin/env node
// The first screens of `genpipe ui` at the size of real histories: the runs page over 1,000 runs,
// and the page of one 100,000-instance run, each timed in headless Chromium from the navigation to
// the first frame painted with its data (the runs table filled; the run's figures shown). Each
// round starts a fresh `genpipe ui` (the built CLI, port 0, loopback), so no round reads what an
// earlier one cached. Targets: < 1 s for each, median of the rounds.
//
// The 1,000 runs are copies of two real runs genpipe makes here against its emulator (one
// completed, one stopped by its budget), each copy under its own pipeline and run id, with the
// files a run leaves: plan.json, journal.jsonl, summary.json, report.json. The 100,000-instance run
// is written with genpipe's own journal writer (as report-million's is) and its summary.json with
// the run's own summary writer, then `genpipe report` writes its report, as a run's end does.
/* global document, requestAnimationFrame, window -- the page functions below run in Chromium */
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { cpus, loadavg, totalmem } from 'node:os';
import { chromium } from 'playwright-core';
import { RunFold } from '../dist/run/journal/run-fold.js';
import { RunSummaryWriter } from '../dist/run/files/run-summary.js';
import { writeSheetRun, sheetSteps } from './lib/sheet-run.mjs';
import { bin, median, runGenpipe, scratchDir, startEmulatorProcess, writeResults } from './lib/harness.mjs';

const CHROMIUM = process.env.GENPIPE_CHROMIUM ?? '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: install Debian's chromium package (npm run test:deps does) or set GENPIPE_CHROMIUM.`);
  process.exit(1);
}
const RUNS = Number(process.env.BENCH_UI_RUNS ?? 1_000);
const BIG = Number(process.env.BENCH_UI_INSTANCES ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const TARGET_S = 1;
const RUN_FILES = ['plan.json', 'journal.jsonl', 'summary.json', 'report.json'];

const dir = scratchDir('ui-first-screen');
const root = join(dir, 'runs');

/** Two real runs against the emulator: 20 sheets completed, and 20 stopped by a budget of US$0.40. */
async function realRuns() {
  const out = join(dir, 'seed-runs');
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  const made = [];
  try {
    for (const [name, extra] of [
      ['done', []],
      ['budget', ['--budget', '0.4']],
    ]) {
      const manifest = join(dir, `${name}.yaml`);
      writeFileSync(
        manifest,
        `version: 1
name: ${name}
defaults:
  polling: { min_ms: 10, initial_ms: 100 }
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: 20 } }
    input: { tier: cats, seed: "{{ seed }}" }
`,
      );
      const run = await runGenpipe([
        'run',
        manifest,
        '--base-url',
        emulator.url,
        '--concurrency',
        '4',
        '--quiet',
        '--yes',
        '--out',
        out,
        ...extra,
      ]);
      if (run.code !== 0 && run.code !== 3) throw new Error(`genpipe run ${name} failed (exit ${run.code}): ${run.stderr.slice(-800)}`);
      const runId = readdirSync(join(out, name)).find((n) => !n.startsWith('.'));
      made.push(join(out, name, runId));
    }
  } finally {
    await emulator.stop();
  }
  for (const runDir of made) for (const file of RUN_FILES) if (!existsSync(join(runDir, file))) throw new Error(`${runDir} has no ${file}`);
  return made;
}

/** `count` run directories copied from the real runs, 20 pipelines of `count / 20` runs, each with its own run id. */
function copies(sources, count) {
  const t0 = Date.UTC(2026, 0, 1);
  for (let i = 0; i < count; i++) {
    const source = sources[i % sources.length];
    const pipeline = `pipeline-${String(i % 20).padStart(2, '0')}`;
    const stamp = new Date(t0 + i * 3_600_000)
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z');
    const runId = `${stamp}-${i.toString(16).padStart(4, '0')}`;
    const target = join(root, pipeline, runId);
    mkdirSync(target, { recursive: true });
    for (const file of RUN_FILES) copyFileSync(join(source, file), join(target, file));
    // The copy names its own run and pipeline where a list shows them.
    const plan = JSON.parse(readFileSync(join(target, 'plan.json'), 'utf8'));
    writeFileSync(join(target, 'plan.json'), JSON.stringify({ ...plan, pipeline, runId }));
    const summary = JSON.parse(readFileSync(join(target, 'summary.json'), 'utf8'));
    writeFileSync(join(target, 'summary.json'), `${JSON.stringify({ ...summary, pipeline, runId })}\n`);
  }
}

/** The 100,000-instance run: its journal by genpipe's journal writer, its summary by the run's summary writer. */
async function bigRun(instances, budgetRun) {
  // The options a real start records (the budget run's), with a budget for this run's size.
  const firstLine = readFileSync(join(budgetRun, 'journal.jsonl'), 'utf8').split('\n')[0];
  const recorded = JSON.parse(firstLine.slice(firstLine.indexOf('{'))).options;
  const runId = '20261201T000000Z-b1g0';
  const run = join(root, 'big', runId);
  const fold = new RunFold(sheetSteps(instances));
  const summary = new RunSummaryWriter(run, { pipeline: 'big', runId }, fold);
  const journalMb = await writeSheetRun(run, {
    pipeline: 'big',
    runId,
    manifest: join(dir, 'big.yaml'),
    instances,
    t0: Date.UTC(2026, 11, 1),
    options: { ...recorded, budgetUsd: instances * 0.06 },
    journaled: (record) => summary.journaled(record),
  });
  await summary.close();
  // The report a run writes at its end (and the gallery with it).
  const report = await runGenpipe(['report', run, '--json'], {}, { discardStdout: true });
  if (report.code !== 0) throw new Error(`genpipe report failed (exit ${report.code}): ${report.stderr.slice(-800)}`);
  return {
    run,
    key: `0/big/${runId}`,
    journalMb,
    summaryBytes: statSync(join(run, 'summary.json')).size,
    reportMb: statSync(join(run, 'report.json')).size / 2 ** 20,
  };
}

/** `genpipe ui` over the runs folder, on a port of its own; resolves once it listens. */
function startUi() {
  const child = spawn(process.execPath, [bin, 'ui', '--out', root, '--port', '0', '--host', '127.0.0.1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  return new Promise((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error(`genpipe ui did not listen within 20 s: ${stderr.slice(-400)}`)), 20_000);
    child.stdout.on('data', (chunk) => {
      buffer += chunk.toString();
      const match = /^listening on (http:\/\/127\.0\.0\.1:\d+)/m.exec(buffer);
      if (!match) return;
      clearTimeout(timer);
      resolve({
        url: match[1],
        stop: () =>
          new Promise((r) => {
            child.once('exit', r);
            child.kill('SIGINT');
          }),
      });
    });
    child.once('exit', (code) => reject(new Error(`genpipe ui exited with ${code}: ${stderr.slice(-400)}`)));
  });
}

/**
 * Seconds from the navigation's start to the first frame painted once the page shows its data, as
 * the page's own clock measures it (performance.now() counts from the navigation's start). `want`:
 * `runs`, the runs page, whose first screen is its first rows (a screenful and more) with the count
 * of all `rows` runs, the rest following in batches (also timed: `whole`); or `run`, a run's page,
 * whose first screen shows the run's money and progress.
 */
async function firstScreen(browser, url, want) {
  const context = await browser.newContext({ viewport: { width: 1600, height: 900 } });
  try {
    const page = await context.newPage();
    const problems = [];
    page.on('pageerror', (error) => problems.push(String(error)));
    await page.addInitScript(({ kind, rows }) => {
      const shown = () => document.querySelectorAll('#runs tr').length;
      const marks = {
        first: () => {
          if (kind !== 'runs') {
            const money = document.getElementById('money');
            const progress = document.getElementById('progress');
            return money !== null && money.textContent !== '' && progress !== null && progress.children.length > 0;
          }
          const count = document.getElementById('count');
          return (
            document.documentElement.dataset.ready === 'true' &&
            count?.textContent?.endsWith(` of ${rows}`) &&
            shown() >= Math.min(rows, 100)
          );
        },
        whole: () => kind !== 'runs' || shown() >= rows,
      };
      window.__screen = {};
      // Looked at before each frame: the frame after the one that first shows the data is the first painted with it.
      for (const [name, ready] of Object.entries(marks)) {
        const look = () => {
          if (ready()) requestAnimationFrame(() => (window.__screen[name] ??= performance.now()));
          else requestAnimationFrame(look);
        };
        requestAnimationFrame(look);
      }
    }, want);
    await page.goto(url);
    await page.waitForFunction(() => window.__screen.first !== undefined && window.__screen.whole !== undefined, null, { timeout: 60_000 });
    if (problems.length > 0) throw new Error(`the page failed: ${problems.join('; ')}`);
    const marks = await page.evaluate(() => window.__screen);
    return { first: marks.first / 1000, whole: marks.whole / 1000 };
  } finally {
    await context.close();
  }
}

const started = Date.now();
const sources = await realRuns();
copies(sources, RUNS);
const big = await bigRun(BIG, sources[1]);
console.error(
  `made ${RUNS} runs and a ${BIG}-instance run in ${((Date.now() - started) / 1000).toFixed(1)} s: journal ${big.journalMb.toFixed(1)} MB, summary.json ${big.summaryBytes} bytes, report.json ${big.reportMb.toFixed(1)} MB`,
);

const expectedRows = RUNS + 1;
// The machine is shared: its load when the rounds start and end says how far to trust them.
const loadBefore = loadavg()[0];
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const list = [];
const listWhole = [];
const runPage = [];
let source;
try {
  for (let round = 0; round < ROUNDS; round++) {
    // A fresh server each time, for each page: nothing is read before the navigation.
    let ui = await startUi();
    try {
      const times = await firstScreen(browser, `${ui.url}/`, { kind: 'runs', rows: expectedRows });
      list.push(times.first);
      listWhole.push(times.whole);
    } finally {
      await ui.stop();
    }
    ui = await startUi();
    try {
      const url = `${ui.url}/run/${big.key.split('/').map(encodeURIComponent).join('/')}/`;
      runPage.push((await firstScreen(browser, url, { kind: 'run' })).first);
      if (round === 0) {
        const answer = await fetch(`${url}api/state`);
        source = (await answer.json()).source;
      }
    } finally {
      await ui.stop();
    }
    console.error(
      `round ${round + 1}: runs page ${list.at(-1).toFixed(3)} s (all rows ${listWhole.at(-1).toFixed(3)} s), run page ${runPage.at(-1).toFixed(3)} s`,
    );
  }
} finally {
  await browser.close();
}

const results = {
  runs_listed: expectedRows,
  run_instances: BIG,
  run_journal_mb: big.journalMb,
  run_summary_bytes: big.summaryBytes,
  run_report_mb: big.reportMb,
  run_page_source: source,
  rounds: ROUNDS,
  runs_page_first_screen_s: list,
  median_runs_page_first_screen_s: median(list),
  runs_page_first_screen_rows: Math.min(expectedRows, 100),
  runs_page_all_rows_s: listWhole,
  median_runs_page_all_rows_s: median(listWhole),
  run_page_first_screen_s: runPage,
  median_run_page_first_screen_s: median(runPage),
  target_s: TARGET_S,
  machine: { cpus: cpus().length, memory_gib: Math.round(totalmem() / 2 ** 30) },
  load_average_1m: { before: loadBefore, after: loadavg()[0] },
};
writeResults('ui-first-screen', results);
console.table({
  [`runs page, ${expectedRows} runs: first screen (median of ${ROUNDS})`]: { seconds: results.median_runs_page_first_screen_s.toFixed(3) },
  [`runs page, ${expectedRows} runs: every row (median of ${ROUNDS})`]: { seconds: results.median_runs_page_all_rows_s.toFixed(3) },
  [`run page, ${BIG} instances, figures from ${source} (median of ${ROUNDS})`]: {
    seconds: results.median_run_page_first_screen_s.toFixed(3),
  },
});
