/**
 * The runs page of `genpipe ui`: every run and every tick that did not start, newest first, with
 * its status, counts and money, filtered by pipeline, status and date. The page takes the list
 * from the server's event stream (`/api/events`: the whole list first, then each run that
 * changed), so it follows runs as they start and end. Money arrives formatted by the server (the
 * one formatter); text from runs is only ever set as textContent. The first hundred rows are drawn
 * before the first paint and the others in batches after it, so a list of a thousand runs shows
 * its first screen without laying out every row first. Plain ES2020, inline, run under the page's
 * policy by its hash.
 */
import { LIVE_LINE, PAGE_LIVE } from './page-live.js';
import { UI_STYLE } from './ui-style.js';

const SCRIPT = String.raw`
(() => {
  'use strict';
${PAGE_LIVE}
  const runs = new Map();
  const body = document.getElementById('runs');
  const filters = { pipeline: document.getElementById('f-pipeline'), status: document.getElementById('f-status'), from: document.getElementById('f-from'), to: document.getElementById('f-to') };
  const COLUMNS = [
    (r) => link(r),
    (r) => r.pipeline,
    (r) => r.status,
    (r) => r.text.done,
    (r) => String(r.reused),
    (r) => String(r.failed),
    (r) => String(r.unknown),
    (r) => r.text.committed,
    (r) => r.text.charged,
    (r) => r.text.net,
    (r) => r.text.unknown,
    (r) => r.text.unpriced,
    (r) => r.text.budget,
    (r) => r.text.duration,
    (r) => r.host || '',
  ];
  function link(r) {
    if (r.status.startsWith('skipped') || r.status.startsWith('refused')) return r.runId;
    const a = document.createElement('a');
    a.href = '/run/' + r.key.split('/').map(encodeURIComponent).join('/') + '/';
    a.textContent = r.runId;
    return a;
  }
  /** The run id's date (its first 8 digits), as an input[type=date] writes one. */
  const dateOf = (r) => r.runId.slice(0, 4) + '-' + r.runId.slice(4, 6) + '-' + r.runId.slice(6, 8);
  function shown(r) {
    if (filters.pipeline.value && r.pipeline !== filters.pipeline.value) return false;
    if (filters.status.value && r.status.split(':')[0] !== filters.status.value) return false;
    if (filters.from.value && dateOf(r) < filters.from.value) return false;
    if (filters.to.value && dateOf(r) > filters.to.value) return false;
    return true;
  }
  function options(select, values) {
    const kept = select.value;
    while (select.options.length > 1) select.remove(1);
    for (const v of [...values].sort()) {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = v;
      select.appendChild(o);
    }
    select.value = kept;
  }
  function row(r) {
    const tr = document.createElement('tr');
    tr.dataset.key = r.key;
    tr.dataset.status = r.status.split(':')[0];
    for (const column of COLUMNS) {
      const td = document.createElement('td');
      const value = column(r);
      if (typeof value === 'string') td.textContent = value;
      else td.appendChild(value);
      tr.appendChild(td);
    }
    return tr;
  }
  /** Rows drawn before the first paint: more than a screen holds. The rest follow, a batch at a time, once it is painted. */
  const FIRST_ROWS = 100;
  const MORE_ROWS = 250;
  let drawing = 0;
  function draw() {
    const turn = ++drawing;
    const list = [...runs.values()].sort((a, b) => (a.runId < b.runId ? 1 : a.runId > b.runId ? -1 : a.key < b.key ? -1 : 1));
    options(filters.pipeline, new Set(list.map((r) => r.pipeline)));
    options(filters.status, new Set(list.map((r) => r.status.split(':')[0])));
    const picked = list.filter(shown);
    body.replaceChildren(...picked.slice(0, FIRST_ROWS).map(row));
    document.getElementById('count').textContent = picked.length + ' of ' + list.length;
    let at = FIRST_ROWS;
    const more = () => {
      // A later draw (a change, a filter) replaces this one's rows.
      if (turn !== drawing || at >= picked.length) return;
      const batch = document.createDocumentFragment();
      for (const r of picked.slice(at, at + MORE_ROWS)) batch.appendChild(row(r));
      body.appendChild(batch);
      at += MORE_ROWS;
      setTimeout(more, 0);
    };
    // Scheduled from the next frame, so they run once it is painted.
    if (at < picked.length) requestAnimationFrame(() => setTimeout(more, 0));
  }
  for (const f of Object.values(filters)) f.addEventListener('input', draw);
  const events = followLive('/api/events');
  events.addEventListener('runs', (e) => {
    runs.clear();
    for (const r of JSON.parse(e.data)) runs.set(r.key, r);
    draw();
    document.documentElement.dataset.ready = 'true';
  });
  events.addEventListener('change', (e) => {
    const { changed, gone } = JSON.parse(e.data);
    for (const r of changed) runs.set(r.key, r);
    for (const key of gone) runs.delete(key);
    draw();
  });
})();
`;

const HEADERS = [
  'run',
  'pipeline',
  'status',
  'done',
  'reused',
  'failed',
  'unknown',
  'committed',
  'charged',
  'net',
  'unknown US$',
  'unpriced',
  'budget',
  'duration',
  'host',
];

/** The page; `token` goes in a meta tag the page's own script reads for its writes. */
export function runsPage(token: string, dirs: readonly string[]): string {
  const esc = (text: string): string => text.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="genpipe-token" content="${esc(token)}"><link rel="icon" href="data:,">
<title>genpipe ui: runs</title><style>${UI_STYLE}</style></head>
<body><header><h1>Runs</h1><nav><a href="/">runs</a> <a href="/compare">compare</a> <a href="/fleet">fleet</a></nav><p class="note">Under ${dirs.map(esc).join(', ')}. The figures are genpipe's own, from each run's journal: the service keeps no ledger to read.</p>${LIVE_LINE}</header>
<div class="filters">
<label>pipeline <select id="f-pipeline"><option value="">all</option></select></label>
<label>status <select id="f-status"><option value="">all</option></select></label>
<label>from <input id="f-from" type="date"></label> <label>to <input id="f-to" type="date"></label> <span id="count"></span>
</div>
<table><thead><tr>${HEADERS.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody id="runs"></tbody></table>
<script>${SCRIPT}</script></body></html>`;
}
