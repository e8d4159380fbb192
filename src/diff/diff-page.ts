/**
 * The page `genpipe diff` writes: a summary of what two runs share, then one row per shared
 * instance with run A and run B side by side (image or player, status, cost, error, request id)
 * and the input fields that differ. Self-contained and static (one small script for the "only
 * differences" switch); it opens from file:// and refers to both runs' files by relative path.
 */
import { existsSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import type { Cell } from '../gallery/gallery-data.js';
import { escapeHtml } from '../gallery/gallery-page.js';
import { formatCount, formatSpend, formatUsd, type MoneyKind } from '../util/format-usd.js';
import type { DiffData, DiffRow } from './diff-data.js';

/** The page says it is genpipe's diff: `genpipe diff --out` overwrites only such a file. */
export const DIFF_PAGE_GENERATOR = 'genpipe diff';

const STYLE = `
:root { color-scheme: light dark; --line: #8884; --muted: #888; --bad: #c62828; --changed: #f9a82533; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1rem 2rem; }
h1 { font-size: 1.2rem; } .muted, .id { color: var(--muted); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35rem; border-top: 1px solid var(--line); }
td.side { width: 30%; }
img, video { display: block; max-width: 100%; max-height: 260px; background: #8882; border-radius: 4px; }
audio { width: 100%; }
.badge { font-size: 12px; padding: 0 .35rem; border-radius: 3px; background: #8883; }
.differs { background: var(--changed); }
.error { color: var(--bad); font-size: 13px; margin: .2rem 0; }
.changes { margin: 0; padding-left: 1rem; font-size: 13px; } .changes code { word-break: break-all; }
body.only-diff tr.same { display: none; }
.answer { white-space: pre-wrap; font-size: 12px; max-height: 10rem; overflow: auto; }
`;

/** A path relative to the page, as a URL path (each segment encoded). */
function href(pageDir: string, runDir: string, path: string): string {
  return relative(pageDir, join(runDir, path)).split(sep).map(encodeURIComponent).join('/');
}

const usd = (n: number | undefined, kind: MoneyKind = 'total'): string => (n === undefined ? '' : formatUsd(n, kind));

function side(cell: Cell | undefined, runDir: string, pageDir: string, differs: boolean): string {
  if (cell === undefined) return '<td class="side"><span class="badge" data-status="not_started">not started</span></td>';
  const media = cell.files
    .map((f) => {
      const src = href(pageDir, runDir, f.path);
      // The run's thumbnail where its gallery made one (an image within 512 px has none: itself).
      const thumb = f.thumb !== undefined && existsSync(join(runDir, f.thumb)) ? href(pageDir, runDir, f.thumb) : src;
      if (f.kind === 'image')
        return `<a href="${escapeHtml(src)}"><img src="${escapeHtml(thumb)}" alt="${escapeHtml(cell.id)}" loading="lazy"></a>`;
      if (f.kind === 'video') return `<video src="${escapeHtml(src)}" controls preload="none"></video>`;
      if (f.kind === 'audio') return `<audio src="${escapeHtml(src)}" controls preload="none"></audio>`;
      if (f.kind === 'text') return '';
      return `<a href="${escapeHtml(src)}">${escapeHtml(f.path.split('/').pop() ?? f.path)}</a>`;
    })
    .join('');
  return `<td class="side${differs ? ' differs' : ''}">${media}${cell.answer === undefined ? '' : `<pre class="answer">${escapeHtml(cell.answer)}</pre>`}
<span class="badge" data-status="${escapeHtml(cell.status)}">${escapeHtml(cell.status.replace('_', ' '))}</span> ${escapeHtml(cell.unpriced ? 'unpriced' : usd(cell.costUsd, 'each'))}${cell.rerollSeed === undefined ? '' : ` <span class="badge">re-rolled: seed ${cell.rerollSeed}</span>`}
${cell.error ? `<p class="error">${escapeHtml(cell.error)}</p>` : ''}${cell.requestId ? `<p class="id">${escapeHtml(cell.requestId)}</p>` : ''}</td>`;
}

function changesCell(row: DiffRow): string {
  if (row.changes === undefined) return '<td class="muted">not known</td>';
  if (row.changes.length === 0) return '<td class="muted">same</td>';
  const items = row.changes
    .map(
      (c) =>
        `<li><code>${escapeHtml(c.field)}</code>: <code>${escapeHtml(c.a ?? '(absent)')}</code> → <code>${escapeHtml(c.b ?? '(absent)')}</code></li>`,
    )
    .join('');
  return `<td class="differs"><ul class="changes">${items}</ul></td>`;
}

export function diffHtml(data: DiffData, pagePath: string): string {
  const pageDir = dirname(pagePath);
  const title = `${data.a.runId} vs ${data.b.runId}`;
  const rows = data.rows
    .map((row) => {
      const differs = (row.changes?.length ?? 0) > 0 || row.statusDiffers || row.costDiffers;
      return `<tr class="${differs ? 'differs-row' : 'same'}" data-instance="${escapeHtml(row.id)}" data-input-changes="${row.changes?.length ?? ''}" data-status-a="${escapeHtml(row.a?.status ?? 'not_started')}" data-status-b="${escapeHtml(row.b?.status ?? 'not_started')}">
<th scope="row"><span class="id">${escapeHtml(row.step)}</span><br>${escapeHtml(row.id)}</th>
${changesCell(row)}
${side(row.a, data.a.runDir, pageDir, row.statusDiffers)}
${side(row.b, data.b.runDir, pageDir, row.statusDiffers)}
</tr>`;
    })
    .join('\n');
  const notes = data.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="${DIFF_PAGE_GENERATOR}">
<title>${escapeHtml(title)}: diff</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>
<h1>${escapeHtml(data.a.pipeline)} ${escapeHtml(data.a.runId)} (A) and ${escapeHtml(data.b.pipeline)} ${escapeHtml(data.b.runId)} (B)</h1>
<p id="summary">${formatCount(data.shared)} shared instances (${formatCount(data.onlyA)} only in A, ${formatCount(data.onlyB)} only in B); inputs differ in ${formatCount(data.inputsDiffer)}, status in ${formatCount(data.statusDiffers)}. Cost of the shared instances: A ${formatSpend({ netUsd: data.a.costUsd, unpricedInstances: data.a.unpricedInstances })}, B ${formatSpend({ netUsd: data.b.costUsd, unpricedInstances: data.b.unpricedInstances })}.</p>
${notes ? `<ul class="muted" id="notes">${notes}</ul>` : ''}
<label><input type="checkbox" id="only-diff"> only instances that differ</label>
<table>
<thead><tr><th>instance</th><th>inputs that differ (A → B)</th><th>A: ${escapeHtml(data.a.runId)}</th><th>B: ${escapeHtml(data.b.runId)}</th></tr></thead>
<tbody>
${rows}
</tbody>
</table>
<script>document.getElementById('only-diff').addEventListener('change', (e) => document.body.classList.toggle('only-diff', e.target.checked));</script>
</body>
</html>
`;
}
