// Unpriced is never zero: a step, model or total row with any unpriced instance reads `unpriced`
// or `US$X + N unpriced` in report.md, report.csv and report.json (a count beside the sum), the
// summary line, `genpipe runs`, the gallery header and notifications. Read from one run that has
// a priced step (character sheets, US$0.05) and an unpriced one (marketing images, no price).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { notifySummary, summaryText } from '../../src/notify/notify-message.js';
import { buildCostReport } from '../../src/report/cost-report.js';
import { emptyCounts } from '../../src/run/events.js';
import { findRunDir, tempDir } from '../run/runner-helpers.js';
import { pageIndex } from '../gallery/read-gallery.js';

/** RFC 4180 rows (quoted cells, doubled quotes), enough for a report. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',' || c === '\n') {
      row.push(cell);
      cell = '';
      if (c === '\n') {
        rows.push(row);
        row = [];
      }
    } else if (c !== '\r') cell += c;
  }
  return rows;
}

let emu: Emulator;
let dir: string;
let runDir: string;
let out: string;
const said: string[] = [];

async function cli(args: string[]): Promise<number> {
  const io: CliIO = {
    out: (t) => said.push(t),
    write: async (t) => void said.push(t),
    err: (t) => said.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  return main(args, io);
}

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = tempDir();
  out = join(dir, 'runs');
  const path = join(dir, 'mixed.yaml');
  writeFileSync(
    path,
    `version: 1
name: mixed
defaults:
  polling: { initial_ms: 100, min_ms: 20, max_ms: 200 }
steps:
  sheets:
    model: character-sheet
    matrix: { seed: [1, 2] }
    input: { tier: cats, seed: "{{ seed }}" }
  ads:
    model: marketing-image
    matrix: { n: [1, 2] }
    input: { prompt: "banner {{ n }}" }
`,
  );
  expect(await cli(['run', path, '--out', out, '--quiet']), said.join('\n')).toBe(0);
  runDir = findRunDir(out, 'mixed');
}, 60_000);
afterAll(async () => {
  await emu.close();
});

describe('unpriced is never zero', () => {
  it('report.json: a count beside each sum', async () => {
    const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
      steps: { name: string; netUsd: number; unpricedInstances: number }[];
      total: { netUsd: number; unpricedInstances: number };
    };
    expect(json.total).toMatchObject({ netUsd: 0.1, unpricedInstances: 2 });
    expect(json.steps.find((s) => s.name === 'ads')).toMatchObject({ netUsd: 0, unpricedInstances: 2 });
  });

  it('report.md: the step, model and total rows say unpriced, never US$0.00', () => {
    const md = readFileSync(join(runDir, 'report.md'), 'utf8');
    expect(md).toContain('Net **US$0.10 + 2 unpriced** (10.00 credits + 2 unpriced at 100 credits per US$): charged US$0.10 + 2 unpriced,');
    const row = (name: string): string => md.split('\n').find((l) => l.startsWith(`| ${name} |`)) ?? '';
    // The step row and the model row, in the charged, net and credits columns.
    for (const name of ['ads', 'marketing-image']) {
      expect(row(name)).toMatch(
        /\| unpriced \(2 instances\) \| — \| US\$0\.00 \| unpriced \(2 instances\) \| unpriced \(2 instances\) \|$/,
      );
    }
    expect(row('sheets')).toMatch(/\| US\$0\.10 \| — \| US\$0\.00 \| US\$0\.10 \| 10\.00 \|$/);
  });

  it('report.csv: no zero sum in a row with unpriced instances, and their count beside it', () => {
    const rows = parseCsv(readFileSync(join(runDir, 'report.csv'), 'utf8'));
    const header = rows[0] as string[];
    const at = (row: string[], column: string): string => row[header.indexOf(column)] as string;
    const group = (level: string, name: string): string[] => rows.find((r) => r[0] === level && r[1] === name) as string[];
    for (const row of [group('step', 'ads'), group('model', 'marketing-image')]) {
      expect(at(row, 'net_usd')).toBe('unpriced');
      expect(at(row, 'estimated_usd')).toBe('unpriced');
      expect(at(row, 'net_credits')).toBe('unpriced');
      expect(at(row, 'unpriced_instances')).toBe('2');
    }
    const total = group('total', 'total');
    expect(at(total, 'net_usd')).toBe('0.1');
    expect(at(total, 'unpriced_instances')).toBe('2');
    for (const row of rows.filter((r) => r[0] === 'instance' && r[3] === 'marketing-image')) expect(at(row, 'net_usd')).toBe('unpriced');
  });

  it('the summary line and genpipe runs', async () => {
    expect(said.join('\n')).toMatch(/^mixed \S+: completed; 4 completed, .*; net US\$0\.10 \+ 2 unpriced; /m);
    said.length = 0;
    expect(await cli(['runs', '--out', out])).toBe(0);
    expect(said.join('\n')).toContain('US$0.10 + 2 unpriced');
  });

  it('the gallery: each step and the header count the unpriced cells beside their sum', () => {
    const page = pageIndex(readFileSync(join(runDir, 'gallery.html'), 'utf8'));
    expect(page.steps.map((s) => [s.id, s.spendUsd, s.unpriced])).toEqual([
      ['sheets', 0.1, 0],
      ['ads', 0, 2],
    ]);
  });

  it('the notification', async () => {
    const report = await buildCostReport(runDir);
    const summary = notifySummary(
      { pipeline: 'mixed', runId: report.runId, runDir, outcome: 'completed', exitCode: 0, counts: emptyCounts(), durationMs: 1000 },
      report,
      'host',
    );
    expect(summary.spend_usd).toMatchObject({ net: 0.1, unpriced_instances: 2 });
    expect(summaryText(summary)).toContain('Spend: US$0.10 + 2 unpriced net (US$0.10 + 2 unpriced charged, US$0.00 refunded).');
  });
});

describe('a run with no priced step at all', () => {
  it(
    'its total reads unpriced in report.md, report.csv, the summary line and genpipe runs, never US$0.00',
    { timeout: 60_000 },
    async () => {
      const path = join(dir, 'none.yaml');
      writeFileSync(
        path,
        'version: 1\nname: none\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 200 }\nsteps:\n  ads:\n    model: marketing-image\n    matrix: { n: [1, 2] }\n    input: { prompt: "banner {{ n }}" }\n',
      );
      const noneOut = join(dir, 'none-runs');
      said.length = 0;
      expect(await cli(['run', path, '--out', noneOut, '--quiet']), said.join('\n')).toBe(0);
      expect(said.join('\n')).toMatch(/^none \S+: completed; 2 completed, .*; net unpriced \(2 instances\); /m);
      const noneDir = findRunDir(noneOut, 'none');
      const md = readFileSync(join(noneDir, 'report.md'), 'utf8');
      expect(md).toContain('Net **unpriced (2 instances)**');
      expect(md).toContain('charged unpriced (2 instances),');
      const rows = parseCsv(readFileSync(join(noneDir, 'report.csv'), 'utf8'));
      const header = rows[0] as string[];
      const total = rows.find((r) => r[0] === 'total') as string[];
      expect(total[header.indexOf('net_usd')]).toBe('unpriced');
      expect(total[header.indexOf('estimated_usd')]).toBe('unpriced');
      expect(total[header.indexOf('unpriced_instances')]).toBe('2');
      said.length = 0;
      expect(await cli(['runs', '--out', noneOut])).toBe(0);
      const listed = said.join('\n');
      expect(listed).toContain('unpriced (2 instances)');
      expect(listed).not.toContain('US$0.00');
    },
  );
});
