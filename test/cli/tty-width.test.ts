// Progress fits the terminal, read off the screen a person sees: genpipe runs in a tmux pane (a
// real pseudo-terminal) of 80 and of 120 columns against the embedded emulator, and the pane is
// read with `tmux capture-pane` while the run goes and once it is over. Every line fits in the
// width; each bar line is exactly a bar line (nothing left of an earlier, longer draw); the bar
// follows the width; the counts and the spend always show; a failure's line and the summary wrap
// at spaces, not mid-word. Runs the built binary (`npm test` builds first); tmux is installed by
// scripts/ensure-test-deps.mjs.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const bin = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tmux(socket: string, ...args: string[]): string {
  const result = spawnSync('tmux', ['-L', socket, ...args], { encoding: 'utf8', timeout: 10_000 });
  if (result.error) throw new Error(`tmux could not be run (scripts/ensure-test-deps.mjs installs it): ${result.error.message}`);
  return result.stdout;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `genpipe run` in a tmux pane of `columns`; the distinct screens seen while it ran, and the last one. */
async function runInPane(columns: number): Promise<{ screens: string[][]; last: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-tty-width-'));
  dirs.push(dir);
  const manifest = join(dir, 'width.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: width
defaults:
  concurrency: 4
  budget_usd: 15
  on_failure: continue
steps:
  campaign-sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: 12 } }
    input: { tier: cats, seed: "{{ seed }}", brief: A cheerful mascot for a pet food brand }
  cats:
    model: character-sheet
    matrix:
      brief: [calm, "[emulator:fail] a brief that the emulator fails, long enough to need a second line"]
    input: { tier: cats, seed: 1, brief: "{{ brief }}" }
`,
  );
  const socket = `genpipe-width-${process.pid}-${columns}`;
  const command = `${process.execPath} ${bin} run ${manifest} --emulator --out ${join(dir, 'out')}; echo GENPIPE-EXIT=$?; sleep 60`;
  tmux(socket, 'new-session', '-d', '-x', String(columns), '-y', '30', command);
  const screens: string[][] = [];
  let last: string[] = [];
  try {
    const until = Date.now() + 60_000;
    while (Date.now() < until) {
      last = tmux(socket, 'capture-pane', '-p', '-t', '0').replace(/\n+$/, '').split('\n');
      if (screens.at(-1)?.join('\n') !== last.join('\n')) screens.push(last);
      if (last.some((line) => line.startsWith('GENPIPE-EXIT='))) break;
      await sleep(100);
    }
  } finally {
    tmux(socket, 'kill-server');
  }
  return { screens, last };
}

/** A bar line, whole: name, an optional bar, the counts and the ETA, and nothing after. */
const BAR_LINE = /^(campaign-sheets|cats {11}) (\[[#.]+\] )?[ \d]{2}\/\d+ *\| +\d+ failed \| +\d+ in flight \| ETA \S+$/;
const SPEND_LINE = /^committed US\$\d+\.\d{2} of US\$15\.00 budget$/;

describe.each([80, 120])('progress in a terminal of %i columns', (columns) => {
  let run: { screens: string[][]; last: string[] };

  it('every line fits, each bar line is whole at every redraw, and the counts and the spend always show', { timeout: 90_000 }, async () => {
    run = await runInPane(columns);
    expect(run.last.find((line) => line.startsWith('GENPIPE-EXIT='))).toBe('GENPIPE-EXIT=1');
    const drawing = run.screens.filter((screen) => screen.some((line) => SPEND_LINE.test(line)));
    expect(drawing.length).toBeGreaterThan(1);
    for (const screen of run.screens) {
      for (const line of screen) expect(line.length, line).toBeLessThan(columns);
      // A line that starts as a bar line is exactly one: a longer earlier draw left nothing behind.
      for (const line of screen.filter((l) => /^(campaign-sheets|cats) /.test(l))) expect(line).toMatch(BAR_LINE);
    }
    for (const screen of drawing) {
      const bars = screen.filter((l) => BAR_LINE.test(l));
      expect(bars.map((l) => l.split(' ')[0])).toEqual(['campaign-sheets', 'cats']);
      expect(screen.filter((l) => SPEND_LINE.test(l))).toHaveLength(1);
    }
  });

  it('the bar follows the width: 40 wide at 120 columns, shrunk to fit at 80, the same width on every step', () => {
    const bars = run.last.filter((l) => BAR_LINE.test(l));
    expect(bars).toHaveLength(2);
    const widths = bars.map((l) => (/\[([#.]+)\]/.exec(l)?.[1] ?? '').length);
    expect(widths[0]).toBe(widths[1]);
    if (columns === 120) expect(widths[0]).toBe(40);
    else {
      expect(widths[0]).toBeGreaterThanOrEqual(5);
      expect(widths[0]).toBeLessThan(40);
    }
    // The run's end as counted (finished of planned): every sheet of the first step done, one of the two cats failed.
    expect(bars[0]).toMatch(/ 12\/12 \| +0 failed \| +0 in flight \| ETA 0s$/);
    expect(bars[1]).toMatch(/ 2\/2 +\| +1 failed \| +0 in flight \| ETA 0s$/);
  });

  it("the failure's line and the summary wrap at spaces, each line within the width", () => {
    const at = run.last.findIndex((l) => SPEND_LINE.test(l));
    const end = run.last.findIndex((l) => l.startsWith('GENPIPE-EXIT='));
    const summary = run.last.slice(at + 1, end);
    expect(summary.length).toBeGreaterThan(1);
    // Wrapped at spaces (a path too long for a line, after a slash): joined so, the lines are the
    // summary's one line, each word whole.
    const joined = summary.reduce((text, line) => (text === '' ? line : text.endsWith('/') ? text + line : `${text} ${line}`), '');
    expect(joined).toMatch(
      /^width \S+: failed; 13 completed, 1 failed, 0 nsfw, 0 canceled; net US\$\d+\.\d{2}; [\d.]+ s; \/\S+\/width\/\S+$/,
    );
    for (const line of summary) expect(line).not.toMatch(/^ | $/);
    // The failure was said above the bars, on lines of its own that together are its sentence.
    const failure = run.last
      .slice(
        0,
        run.last.findIndex((l) => BAR_LINE.test(l)),
      )
      .filter((l) => l !== '');
    expect(failure.length).toBeGreaterThan(1);
    expect(failure.join(' ')).toMatch(
      /^cats\[brief="\[emulator:fail\] a brief that the emulator fails, long enough to need a second line"\]: /,
    );
  });
});
