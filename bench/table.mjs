#!/usr/bin/env node
// The benchmark table of docs/benchmarks.md, made from bench/results/*.json: one row per target
// ever set, met or missed, each figure read from the results of the benchmark that measured it, so
// the page cannot say what no run measured. `npm run bench` runs it last; `node bench/table.mjs`
// rewrites the table from the results on disk. A row whose benchmark did not run says so.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { formatMoney } from '../dist/util/format-usd.js';
import { here, root } from './lib/harness.mjs';

const PAGE = join(root, 'docs', 'benchmarks.md');
const START = '<!-- bench-table: start (bench/table.mjs writes what follows) -->';
const END = '<!-- bench-table: end -->';

/** Every results file, by benchmark name (the file's stem). */
export function readResults(dir = join(here, 'results')) {
  const results = {};
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.json') && !f.startsWith('soak-'))) {
    results[file.slice(0, -'.json'.length)] = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  }
  return results;
}

const x = (n, digits = 3) => `${Number(n).toFixed(digits)}x`;
const s = (n, digits = 2) => `${Number(n).toFixed(digits)} s`;
const mb = (n) => `${Math.round(n)} MB`;
const int = (n) => Math.round(n).toLocaleString('en-US');
const yes = (ok) => (ok ? 'yes' : '**no**');
const usd = (n) => formatMoney(n, 'total');

/**
 * The rows: `bench` names the results file, `result` and `met` read it, `target` says the target
 * in words (each round of a stricter target on the same row). Targets are never removed: a row
 * stays when its target is missed, and a new target is a new row or a new round of a row.
 */
export const ROWS = [
  {
    bench: 'plan-million',
    what: '`genpipe plan` of 1,000,000 instances',
    result: (r) => `${s(r.results[0].median_wall_s)}, ${mb(r.results[0].median_peak_rss_mb)} peak`,
    target: '5 s, 512 MB',
    met: (r) => yes(r.results[0].median_wall_s <= 5 && r.results[0].median_peak_rss_mb <= 512),
  },
  {
    bench: 'plan-million',
    what: '`genpipe plan --json` of 1,000,000 instances',
    result: (r) =>
      `${s(r.results[1].median_wall_s)}, ${mb(r.results[1].median_peak_rss_mb)}; ${x(r.results[1].ratio_to_validate, 2)} \`validate\``,
    target: '5 s (first round); 2x `validate` (second round)',
    met: (r) => `${yes(r.results[1].median_wall_s <= 5)}; ${yes(r.results[1].ratio_to_validate <= 2)}`,
  },
  {
    bench: 'emulator-status',
    what: 'emulator status requests',
    result: (r) =>
      `${int(r.emulator_median_rps)} req/s, ${(r.ratio * 100).toFixed(1)}% of a bare node:http server (${int(r.bare_median_rps)})`,
    target: '5,000 req/s, 25%',
    met: (r) => yes(r.emulator_median_rps >= 5000 && r.ratio >= 0.25),
  },
  {
    bench: 'makespan',
    what: 'makespan, 500 jobs of 1-10 s at concurrency 20 (webhook mode)',
    result: (r) =>
      `${x(r.genpipe.ratio_to_ideal)} the ideal; the packing floor (each job seen done the instant it ends) ${x(r.seen_at_once_ratio_to_ideal)}`,
    target: '1.05x (first round); 1.03x (second round)',
    met: (r) => `${yes(r.genpipe.ratio_to_ideal <= 1.05)}; ${yes(r.genpipe.ratio_to_ideal <= 1.03)}`,
  },
  {
    bench: 'makespan',
    what: 'the same against the official client (`@higgsfield/client` `subscribe` with p-limit)',
    result: (r) => `${x(r.makespan_ratio_genpipe_to_official)} its makespan, ${x(r.requests_ratio_genpipe_to_official)} its HTTP requests`,
    target: '0.9x, 0.5x',
    met: (r) => yes(r.makespan_ratio_genpipe_to_official <= 0.9 && r.requests_ratio_genpipe_to_official <= 0.5),
  },
  {
    bench: 'polling',
    what: 'polling makespan, 300 sheets of 1.7-4.4 s at concurrency 20, against the ideal client',
    result: (r) =>
      `${x(r.genpipe_polling.ratio_to_ideal_client)} cold, ${x(r.genpipe_polling_with_history.ratio_to_ideal_client)} after an earlier run; the official client ${x(r.official_client.ratio_to_ideal_client)}; the floor within the request budget ${x(r.planned_polls_at_request_budget.ratio_to_packing)}`,
    target: '1.05x (first round); 1.12x, and 1.10x after an earlier run (second round)',
    met: (r) =>
      `${yes(r.genpipe_polling.ratio_to_ideal_client <= 1.05)}; ${yes(r.genpipe_polling.ratio_to_ideal_client <= 1.12 && r.genpipe_polling_with_history.ratio_to_ideal_client <= 1.1)}`,
  },
  {
    bench: 'polling',
    what: "HTTP requests of that polling run against the official client's",
    result: (r) =>
      `${x(r.polling_requests_to_official)} (${int(r.genpipe_polling.http_requests)} against ${int(r.official_client.http_requests)})`,
    target: '0.8x',
    met: (r) => yes(r.polling_requests_to_official <= 0.8),
  },
  {
    bench: 'polling',
    what: 'the same workload in webhook mode',
    result: (r) =>
      `${x(r.genpipe_webhooks.ratio_to_ideal_client)} the ideal client; ${x(r.webhook_makespan_to_official)} the official client's makespan`,
    target: '1.05x',
    met: (r) => yes(r.genpipe_webhooks.ratio_to_ideal_client <= 1.05),
  },
  {
    bench: 'throughput',
    what: 'throughput at zero latency, 10,000 character sheets',
    result: (r) => `${int(r.genpipe_median_instances_per_s)} instances/s`,
    target: '1,000/s',
    met: (r) => yes(r.genpipe_median_instances_per_s >= 1000),
  },
  {
    bench: 'throughput',
    what: "throughput against a minimal client with genpipe's durability (a journal, the intent synced before each submit)",
    result: (r) =>
      `${x(r.ratio_to_minimal_client_with_journal)} (${int(r.genpipe_median_instances_per_s)}/s against ${int(r.minimal_client_with_journal_median_instances_per_s)}/s); ${x(r.ratio_to_minimal_client)} the plain minimal client`,
    target: '0.8x',
    met: (r) => yes(r.ratio_to_minimal_client_with_journal >= 0.8),
  },
  {
    bench: 'throughput',
    what: 'user CPU per instance against that durable minimal client',
    result: (r) =>
      `${x(r.user_cpu_ratio_to_minimal_with_journal ?? r.cpu_s.genpipe.user / r.cpu_s.minimal_with_journal.user, 2)} (${r.cpu_s.genpipe.user} s against ${r.cpu_s.minimal_with_journal.user} s for 10,000)`,
    target: '1.5x',
    met: (r) => yes((r.user_cpu_ratio_to_minimal_with_journal ?? r.cpu_s.genpipe.user / r.cpu_s.minimal_with_journal.user) <= 1.5),
  },
  {
    bench: 'throughput',
    what: 'bytes allocated per instance against that durable minimal client',
    result: (r) =>
      r.allocation
        ? `${x(r.allocation.ratio, 2)} (${r.allocation.genpipe_kb_per_instance} KB against ${r.allocation.minimal_with_journal_kb_per_instance} KB)`
        : undefined,
    target: '1.5x',
    met: (r) => (r.allocation ? yes(r.allocation.ratio <= 1.5) : undefined),
  },
  {
    bench: 'throughput',
    what: 'peak RSS of a 100,000-instance run at zero latency',
    result: (r) => (r.memory ? mb(r.memory.peak_rss_mb) : undefined),
    target: '400 MB (first round); 260 MB (second round)',
    met: (r) => (r.memory ? `${yes(r.memory.peak_rss_mb <= 400)}; ${yes(r.memory.peak_rss_mb <= 260)}` : undefined),
  },
  {
    bench: 'startup',
    what: '`genpipe --help`, the whole process',
    result: (r) =>
      `${Math.round(r.medianMs['genpipe --help'])} ms, ${x(r.helpRatio, 2)} \`node -e 0\` (${Math.round(r.medianMs['node -e 0'])} ms)`,
    target: '2x (first round); 1.5x (second round)',
    met: (r) => `${yes(r.helpRatio <= 2)}; ${yes(r.helpRatio <= 1.5)}`,
  },
  {
    bench: 'startup',
    what: '`genpipe validate pipelines/quickstart.yaml`, the whole process',
    result: (r) => `${Math.round(r.medianMs['genpipe validate quickstart'])} ms, ${x(r.validateRatio, 2)} \`node -e 0\``,
    target: '3x',
    met: (r) => yes(r.validateRatio <= 3),
  },
  {
    bench: 'report-million',
    what: '`genpipe report` of a 1,000,000-instance journal',
    result: (r) =>
      `${s(r.results[1].median_wall_s)}, ${mb(r.results[1].median_peak_rss_mb)} peak; ${x(r.results[1].ratio_to_bare_reader)} a bare streaming reader`,
    target: '10 s, 300 MB (first round); 1.2x a bare reader (second round)',
    met: (r) =>
      `${yes(r.results[1].median_wall_s <= 10 && r.results[1].median_peak_rss_mb <= 300)}; ${yes(r.results[1].ratio_to_bare_reader <= 1.2)}`,
  },
  {
    bench: 'report-million',
    what: '`genpipe report` of a 100,000-instance journal (it also rewrites the gallery)',
    result: (r) =>
      `${s(r.results[0].median_wall_s)}, ${mb(r.results[0].median_peak_rss_mb)} peak; ${x(r.results[0].ratio_to_bare_reader)} a bare reader`,
    target: 'the 1,000,000 report needs no more memory (first round); 1.5x a bare reader (second round)',
    met: (r) =>
      `${yes(r.results[1].median_peak_rss_mb <= r.results[0].median_peak_rss_mb)}; ${yes(r.results[0].ratio_to_bare_reader <= 1.5)}`,
  },
  {
    bench: 'gallery',
    what: 'gallery of a 10,000-instance run: first screen in headless Chromium',
    result: (r) => `${s(r.results[0].median_first_screen_s)}; page ${int(r.results[0].page_bytes)} bytes`,
    target: '2 s',
    met: (r) => yes(r.results[0].median_first_screen_s <= 2),
  },
  {
    bench: 'gallery',
    what: "gallery of a 100,000-instance run: first screen and the page's size",
    result: (r) => {
      const g = r.results.find((row) => row.instances === 100_000);
      return g ? `${s(g.median_first_screen_s)}; page ${int(g.page_bytes)} bytes` : undefined;
    },
    target: '1 s, 5 MB',
    met: (r) => {
      const g = r.results.find((row) => row.instances === 100_000);
      return g ? yes(g.median_first_screen_s <= 1 && g.page_bytes <= 5 * 1024 * 1024) : undefined;
    },
  },
  {
    bench: 'ui-first-screen',
    what: '`genpipe ui` runs page over 1,000 runs: first screen in headless Chromium, on this 2-core machine',
    result: (r) =>
      `${s(r.median_runs_page_first_screen_s, 3)} (its first ${r.runs_page_first_screen_rows} rows and the count of all; every row ${s(r.median_runs_page_all_rows_s, 3)}), median of ${r.rounds} fresh servers, load average ${r.load_average_1m.before.toFixed(1)}`,
    target: '< 1 s',
    met: (r) => yes(r.median_runs_page_first_screen_s < 1),
  },
  {
    bench: 'ui-first-screen',
    what: '`genpipe ui` page of a 100,000-instance run: first screen in headless Chromium, on this 2-core machine',
    result: (r) =>
      `${s(r.median_run_page_first_screen_s, 3)} (median of ${r.rounds}; figures from its ${r.run_page_source}, ${int(r.run_summary_bytes)} bytes, beside a ${Math.round(r.run_journal_mb)} MB journal)`,
    target: '< 1 s',
    met: (r) => yes(r.median_run_page_first_screen_s < 1),
  },
  {
    bench: 'fleet',
    what: 'fleet throughput at zero latency, 2,000 sheets, against the local backend',
    result: (r) => `1 worker ${x(r.throughput.ratio_1_worker_to_local)}, 2 workers ${x(r.throughput.ratio_2_workers_to_local)}`,
    target: '0.5x (first round); 0.6x (second round)',
    met: (r) =>
      `${yes(Math.min(r.throughput.ratio_1_worker_to_local, r.throughput.ratio_2_workers_to_local) >= 0.5)}; ${yes(Math.min(r.throughput.ratio_1_worker_to_local, r.throughput.ratio_2_workers_to_local) >= 0.6)}`,
  },
  {
    bench: 'fleet',
    what: 'fleet makespan, 500 jobs of 1-10 s, account cap 20, 4 workers',
    result: (r) =>
      `${x(r.makespan.webhooks.ratio_to_ideal)} with workers following by webhook; ${x(r.makespan.polling.ratio_to_ideal)} with workers that poll`,
    target: '1.05x',
    met: (r) =>
      `${yes(r.makespan.webhooks.ratio_to_ideal <= 1.05)} (webhooks); ${yes(r.makespan.polling.ratio_to_ideal <= 1.05)} (polling)`,
  },
  {
    bench: 'fleet',
    what: 'fleet recovery: kill -9 of a worker holding 20 jobs, to the first of them done on another',
    result: (r) =>
      `${s(r.recovery.worker_kill_to_first_recovered_s, 1)}; after a kill -9 of Redis (AOF), the next completion ${s(r.recovery.redis_restart_to_next_completion_s)} after its restart`,
    target: '< 20 s',
    met: (r) => yes(r.recovery.worker_kill_to_first_recovered_s < 20),
  },
  {
    bench: 'gateway-faults',
    what: 'submits answered 502 or 504 after being processed and charged, or cut: 100 keyed sheets and 100 keyless images',
    result: (r) =>
      `genpipe paid twice for ${usd(r.genpipe.paid_twice_usd)} (${r.genpipe.ads.unknown_instances} keyless images left unknown, never resent); the official client paid twice for ${r.official_client.sheets.instances_charged_more_than_once + r.official_client.ads.instances_charged_more_than_once} of 200 (${usd(r.official_client.paid_twice_usd)})`,
    target: 'no instance paid twice',
    met: (r) => yes(r.genpipe.paid_twice_usd === 0),
  },
  {
    bench: 'sink',
    what: 'storage sink, 2,000 sheets at zero latency, against the same run without one (s3rver on loopback)',
    result: (r) => `${x(r.ratio, 2)} (${Math.round(r.withSinkPerS)}/s against ${Math.round(r.withoutSinkPerS)}/s)`,
    target: '0.8x',
    met: (r) => yes(r.ratio >= 0.8),
  },
  {
    bench: 'throttle',
    what: '240 sheets with 2% of submits answered 429 (`Retry-After: 1`), against the same run without faults',
    result: (r) => `${x(r.sparse_429.ratio)} the makespan (${s(r.sparse_429.with_faults_s)} against ${s(r.sparse_429.without_faults_s)})`,
    target: '1.3x',
    met: (r) => yes(r.sparse_429.ratio <= 1.3),
  },
  {
    bench: 'throttle',
    what: 'the same under a true rate limit of 10 submits/s (429 above it)',
    result: (r) =>
      `${r.rate_limit.genpipe.sustained_per_s}/s sustained (the limit ${x(r.rate_limit.limit_over_sustained)} that); ${r.rate_limit.genpipe.per100} 429s per 100 submits, the official client ${r.rate_limit.official_client.per100} at ${r.rate_limit.official_client.sustained_per_s}/s`,
    target: 'within 1.1x of 10/s; no more 429s per 100 submits than the official client',
    met: (r) => yes(r.rate_limit.limit_over_sustained <= 1.1 && r.rate_limit.genpipe.per100 <= r.rate_limit.official_client.per100),
  },
  {
    bench: 'true-sizes',
    what: 'true sizes: 2,000 sheets at 2048x1152, against the durable minimal client making the same downloads',
    result: (r) =>
      `${x(r.ratio_to_minimal_client_with_journal, 2)} (${r.genpipe_instances_per_s}/s against ${r.minimal_client_with_journal_instances_per_s}/s, ${r.genpipe_mib_downloaded} MiB each)`,
    target: 'measured, no target set',
    met: () => undefined,
  },
];

/** The table's Markdown: a header, then one line per row, in ROWS order. */
export function renderTable(results) {
  const lines = ['| benchmark | result | target | met |', '|---|---|---|---|'];
  for (const row of ROWS) {
    const r = results[row.bench];
    const result = r ? row.result(r) : undefined;
    const met = r ? row.met(r) : undefined;
    const missing = r ? 'not measured by this run of its benchmark' : `not measured: \`bench/${row.bench}.bench.mjs\` did not run`;
    lines.push(`| ${row.what} | ${result ?? missing} | ${row.target} | ${met ?? '—'} |`);
  }
  return lines.join('\n');
}

/** One sentence on the run: its dates, commits and Node versions, from the results themselves. */
export function renderProvenance(results) {
  const all = ROWS.map((row) => results[row.bench]).filter(Boolean);
  const times = all
    .map((r) => r.measured_at ?? r.date)
    .filter(Boolean)
    .sort();
  const commits = [...new Set(all.map((r) => r.commit ?? 'unrecorded'))];
  const nodes = [...new Set(all.map((r) => r.node))];
  return `The table below was made by \`bench/table.mjs\` from \`bench/results/\`: measured from ${times[0]} to ${times.at(-1)}, on commit ${commits.join(', ')}, Node ${nodes.join(', ')}.`;
}

/** The page with its table (between the markers) made again from `results`. */
export function withTable(page, results) {
  const a = page.indexOf(START);
  const b = page.indexOf(END);
  if (a < 0 || b < a) throw new Error(`${PAGE} has no ${START} ... ${END} section`);
  return `${page.slice(0, a + START.length)}\n${renderProvenance(results)}\n\n${renderTable(results)}\n${page.slice(b)}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const page = readFileSync(PAGE, 'utf8');
  writeFileSync(PAGE, withTable(page, readResults()));
  console.log(`bench/table.mjs: wrote the table of ${PAGE}`);
}
